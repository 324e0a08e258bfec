-- Mixed proxy load for Benchmarks/soak.sh: hits, misses, GBK queries, JSON bodies with
-- long number literals, and a logged-in endpoint whose token expires under the load.
local counter = 0
local thread_tag = tostring(math.random(1, 1e9))

request = function()
  counter = counter + 1
  local r = math.random(100)
  if r <= 60 then
    return wrk.format("GET", "/api/items?limit=" .. math.random(50))
  elseif r <= 75 then
    return wrk.format("GET", "/api/items?miss=" .. thread_tag .. "-" .. counter)
  elseif r <= 83 then
    -- GBK "中文" and a non-UTF-8 byte: forwarded byte for byte, their own entries.
    return wrk.format("GET", "/api/items?q=%D6%D0%CE%C4&x=%ff&n=" .. math.random(200))
  elseif r <= 90 then
    return wrk.format("POST", "/api/items", {["Content-Type"] = "application/json"},
      '{"id":12345678901234567891,"price":123456789012345678.12,"n":' .. math.random(200) .. '}')
  else
    return wrk.format("GET", "/api/user/info?r=" .. math.random(20))
  end
end

statuses = {}
response = function(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

done = function(summary, latency, requests)
  io.write("status codes: (per-thread tables are not merged by wrk; see non-2xx above)\n")
end
