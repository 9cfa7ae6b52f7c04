-- wrk's requests for run_http_bench.sh: GET /v1/policy?domain=bench&tenant=N,
-- N cycling over KEYS (environment, default 100000) keys. The requests are
-- formatted once per thread, in init (once wrk has set the Host header), so
-- that wrk spends its time sending them.
local keys = tonumber(os.getenv("KEYS") or "100000")
local requests = {}
local next_request = 0

init = function(args)
  for n = 1, keys do
    requests[n] = wrk.format("GET", "/v1/policy?domain=bench&tenant=" .. n)
  end
end

request = function()
  next_request = next_request % keys + 1
  return requests[next_request]
end
