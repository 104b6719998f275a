-- wrk script for bench/soak.sh: each connection loops through a run's life —
-- start a run (runtime key from $RUNTIME_KEY), issue $CAPS capabilities with
-- its token, end it — so the store fills the way an agent platform fills it.
-- One connection per thread (-t N -c N): request and response alternate.
local key = os.getenv("RUNTIME_KEY")
local caps = tonumber(os.getenv("CAPS") or "10")
local step, token, run_id, n = "start", nil, nil, 0
local body = '{"action":"read","resource":"svc-reports:reports/2026/q1.csv"}'

function request()
  if step == "start" or token == nil then
    n = n + 1
    return wrk.format("POST", "/v1/runs",
      { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. key },
      '{"user":"alice","task":{"id":"soak-' .. n .. '","kind":"summarize"},"ttl":"10m"}')
  elseif step == "end" then
    return wrk.format("POST", "/v1/runs/" .. run_id .. "/end",
      { ["Authorization"] = "Bearer " .. key })
  end
  return wrk.format("POST", "/v1/capabilities",
    { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token }, body)
end

function response(status, headers, resp)
  if step == "start" or token == nil then
    token = resp:match('"run_token"%s*:%s*"([^"]+)"')
    run_id = resp:match('"run_id"%s*:%s*"([^"]+)"')
    step, left = "caps", caps
  elseif step == "end" then
    step, token = "start", nil
  else
    left = left - 1
    if left <= 0 then step = "end" end
  end
  if status >= 300 then
    io.stderr:write("unexpected status " .. status .. "\n")
  end
end
