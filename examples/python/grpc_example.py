"""Envoy's rate limit service on tally's gRPC front, from grpcio: four
ShouldRateLimit calls for one descriptor under examples/policies/example.yaml
(3 an hour per user).

The messages come from tally's copy of Envoy's protos, generated once:
  protoc -I protocol --python_out=gen envoy/type/v3/ratelimit_unit.proto \\
      envoy/config/core/v3/base.proto envoy/extensions/common/ratelimit/v3/ratelimit.proto \\
      envoy/service/ratelimit/v3/rls.proto
Usage: PYTHONPATH=gen python3 grpc_example.py [HOST:PORT]   (default 127.0.0.1:8081)
"""
import sys

import grpc
from envoy.service.ratelimit.v3 import rls_pb2

target = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8081"
Response = rls_pb2.RateLimitResponse

with grpc.insecure_channel(target) as channel:
    should_rate_limit = channel.unary_unary(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
        response_deserializer=Response.FromString)
    request = rls_pb2.RateLimitRequest(domain="example")
    request.descriptors.add().entries.add(key="user", value="42")
    for _ in range(4):
        response = should_rate_limit(request, timeout=5)
        status = response.statuses[0]
        if response.overall_code == Response.OK:
            print(f"ShouldRateLimit user=42: allowed, remaining {status.limit_remaining}")
        else:
            wait = status.duration_until_reset  # rounded up to whole seconds
            print(f"ShouldRateLimit user=42: denied, retry after "
                  f"{wait.seconds + (wait.nanos > 0)} s")
