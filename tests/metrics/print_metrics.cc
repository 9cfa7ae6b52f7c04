// Prints Metrics::Render() of tests/metrics/sample_node.h, for the test that
// parses it with a real Prometheus parser (metrics_parse_test.py).
#include <cstdio>

#include "tests/metrics/sample_node.h"

int main() {
  tally::testing::SampleNode node;
  tally::Metrics metrics(node.Sources());
  metrics.AddFront("protocol", &node.protocol);
  metrics.AddFront("grpc", &node.grpc);
  const std::string text = metrics.Render();
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}
