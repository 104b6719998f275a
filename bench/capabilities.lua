-- wrk script: POST /v1/capabilities with run tokens read from $TOKENS_FILE,
-- spread round-robin across requests.
local tokens = {}
local i = 0
local body = '{"action":"read","resource":"svc-reports:reports/2026/q1.csv"}'

function init(args)
  local path = os.getenv("TOKENS_FILE")
  for line in io.lines(path) do
    tokens[#tokens + 1] = line
  end
end

function request()
  i = i + 1
  local t = tokens[(i % #tokens) + 1]
  return wrk.format("POST", "/v1/capabilities",
    { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. t }, body)
end

function response(status, headers, body)
  if status ~= 201 then
    io.stderr:write("unexpected status " .. status .. "\n")
  end
end
