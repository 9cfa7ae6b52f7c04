// tally's Redis front from redigo: CL.THROTTLE (redis-cell's command) and
// TALLY.CHECK, four requests each against a limit of 3.
// Usage: go run ./resp [HOST:PORT]   (default 127.0.0.1:6380, tallyd --resp-port)
package main

import (
	"fmt"
	"log"
	"os"
	"time"

	"github.com/gomodule/redigo/redis"
)

func main() {
	address := "127.0.0.1:6380"
	if len(os.Args) > 1 {
		address = os.Args[1]
	}
	conn, err := redis.Dial("tcp", address, redis.DialConnectTimeout(5*time.Second),
		redis.DialReadTimeout(5*time.Second), redis.DialWriteTimeout(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	for i := 0; i < 4; i++ {
		// A bucket of 3 (max_burst 2) refilled with 3 tokens per 60 s.
		reply, err := redis.Int64s(conn.Do("CL.THROTTLE", "user:7", 2, 3, 60))
		if err != nil {
			log.Fatal(err)
		}
		if reply[0] == 1 {
			fmt.Printf("CL.THROTTLE user:7: denied, retry after %d s\n", reply[3])
		} else {
			fmt.Printf("CL.THROTTLE user:7: allowed, remaining %d\n", reply[2])
		}
	}
	for i := 0; i < 4; i++ {
		// A sliding window of 60 s holding 3 requests. RESP2 replies name/value pairs.
		decision, err := redis.Int64Map(conn.Do("TALLY.CHECK", "user:42", "sliding_counter", 3, 60000))
		if err != nil {
			log.Fatal(err)
		}
		if decision["allowed"] == 1 {
			fmt.Printf("TALLY.CHECK user:42: allowed, remaining %d\n", decision["remaining"])
		} else {
			fmt.Printf("TALLY.CHECK user:42: denied, retry after %d ms\n", decision["retry_after_ms"])
		}
	}
}
