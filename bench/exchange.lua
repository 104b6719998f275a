-- wrk script: POST /v1/exchange with capability tokens read from $TOKENS_FILE,
-- spread round-robin across requests.
local tokens = {}
local i = 0

function init(args)
  for line in io.lines(os.getenv("TOKENS_FILE")) do
    tokens[#tokens + 1] = line
  end
end

function request()
  i = i + 1
  local t = tokens[(i % #tokens) + 1]
  return wrk.format("POST", "/v1/exchange", { ["Content-Type"] = "application/json" },
    '{"capability":"' .. t .. '"}')
end
