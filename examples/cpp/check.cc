// tally's own protocol from the C++ client library (protocol/client.h): four
// checks of one limit (3 per minute).
// Build against the .deb: g++ -std=c++20 check.cc $(pkg-config --cflags --libs tally-client)
// Usage: ./check [HOST PORT]   (default 127.0.0.1 7420, tallyd --port)
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "protocol/client.h"

int main(int argc, char** argv) {
  tally::protocol::Client::Options options;
  options.host = argc > 2 ? argv[1] : "127.0.0.1";
  options.port = static_cast<uint16_t>(argc > 2 ? std::atoi(argv[2]) : 7420);
  std::unique_ptr<tally::protocol::Client> client;
  if (tally::Status status = tally::protocol::Client::Connect(options, &client); !status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  tally::protocol::Check check;
  check.key = "user:42";
  check.spec = {tally::Algorithm::kSlidingWindowCounter, /*limit=*/3, /*window_ms=*/60000};
  for (int i = 0; i < 4; ++i) {
    tally::protocol::CheckOutcome outcome;
    if (tally::Status status = client->Check(check, &outcome); !status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
    const tally::Decision& decision = outcome.decision;
    if (decision.allowed) {
      std::printf("Check user:42: allowed, remaining %llu\n",
                  static_cast<unsigned long long>(decision.remaining));
    } else {
      std::printf("Check user:42: denied, retry after %llu ms\n",
                  static_cast<unsigned long long>(decision.retry_after_ms));
    }
  }
  return 0;
}
