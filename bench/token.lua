-- wrk script: POST /oauth/token (RFC 8693 token exchange) with run tokens read
-- from $TOKENS_FILE, spread round-robin across requests.
local tokens = {}
local i = 0

function init(args)
  for line in io.lines(os.getenv("TOKENS_FILE")) do
    tokens[#tokens + 1] = line
  end
end

function request()
  i = i + 1
  local body = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange"
    .. "&subject_token_type=urn%3Atessera%3Aparams%3Aoauth%3Atoken-type%3Arun_token"
    .. "&resource=https%3A%2F%2Fnotes.bench%2Fmcp&scope=notes%3Aread"
    .. "&subject_token=" .. tokens[(i % #tokens) + 1]
  return wrk.format("POST", "/oauth/token",
    { ["Content-Type"] = "application/x-www-form-urlencoded" }, body)
end

function response(status, headers, body)
  if status ~= 200 then
    io.stderr:write("unexpected status " .. status .. "\n")
  end
end
