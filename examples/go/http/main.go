// tally's HTTP API from Go's standard library: four checks of one limit
// (3 per minute), with the headers of each answer.
// Usage: go run ./http [URL]   (default http://127.0.0.1:8080, tallyd --http-port)
package main

import (
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	url := "http://127.0.0.1:8080"
	if len(os.Args) > 1 {
		url = os.Args[1]
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for i := 0; i < 4; i++ {
		body := strings.NewReader(`{"key": "user:42", "limit": 3, "window_ms": 60000}`)
		response, err := client.Post(url+"/v1/check", "application/json", body)
		if err != nil {
			log.Fatal(err)
		}
		var decision struct {
			Remaining uint64 `json:"remaining"`
		}
		err = json.NewDecoder(response.Body).Decode(&decision)
		response.Body.Close()
		if err != nil {
			log.Fatal(err)
		}
		if response.StatusCode == http.StatusOK {
			fmt.Printf("POST /v1/check user:42: allowed, remaining %d\n", decision.Remaining)
		} else {
			fmt.Printf("POST /v1/check user:42: denied, retry after %s s (%d)\n",
				response.Header.Get("Retry-After"), response.StatusCode)
		}
	}
}
