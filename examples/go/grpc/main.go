// Envoy's rate limit service on tally's gRPC front, from grpc-go: four
// ShouldRateLimit calls for one descriptor under examples/policies/example.yaml
// (3 an hour per user). The messages are Envoy's, as go-control-plane names
// them; examples/README.md says how to generate them from tally's copy.
// Usage: go run ./grpc [HOST:PORT]   (default 127.0.0.1:8081, tallyd --grpc-port)
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	ratelimitcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimit "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

func main() {
	target := "127.0.0.1:8081"
	if len(os.Args) > 1 {
		target = os.Args[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, target, grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := ratelimit.NewRateLimitServiceClient(conn)

	request := &ratelimit.RateLimitRequest{
		Domain: "example",
		Descriptors: []*ratelimitcommon.RateLimitDescriptor{{
			Entries: []*ratelimitcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "42"}},
		}},
	}
	for i := 0; i < 4; i++ {
		response, err := client.ShouldRateLimit(ctx, request)
		if err != nil {
			log.Fatal(err)
		}
		status := response.Statuses[0]
		if response.OverallCode == ratelimit.RateLimitResponse_OK {
			fmt.Printf("ShouldRateLimit user=42: allowed, remaining %d\n", status.LimitRemaining)
		} else {
			wait := status.DurationUntilReset.AsDuration() // rounded up to whole seconds
			fmt.Printf("ShouldRateLimit user=42: denied, retry after %d s\n",
				(wait+time.Second-1)/time.Second)
		}
	}
}
