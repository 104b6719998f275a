-- wrk script for the ceiling endpoint: the same request body, no auth.
wrk.method = "POST"
wrk.body = '{"action":"read","resource":"svc-reports:reports/2026/q1.csv"}'
wrk.headers["Content-Type"] = "application/json"
