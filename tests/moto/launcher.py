"""moto, made strict enough to test Tessera's AWS backend against.

moto 5.2 implements STS AssumeRole and checks a role's own policies on S3 calls,
but it ignores what Tessera relies on: the inline session policy, its
`DateLessThan aws:CurrentTime` condition, the credentials' expiry, session tags
and SourceIdentity (it drops them), and IAM conditions in general (a statement
with any condition it cannot read counts as a deny). A test against plain moto
would pass whatever policy the broker sent. This launcher runs moto's own server
with authentication on from the first request (INITIAL_NO_AUTH_ACTION_COUNT=0)
and adds, in-process:

* AssumeRole: records the exact request (role, session name, session policy,
  duration, external id, tags, source identity) against the access key it
  returns, and validates it as STS would (lengths, charsets, 900-43200 s, the
  2048-character session policy limit, tag count/size, sts:TagSession and
  sts:SetSourceIdentity in the trust policy, the role must exist).
* Authorisation of requests signed with assumed-role credentials: refused once
  the credentials expire; otherwise allowed only if the role's policies allow
  AND the session policy allows, and no statement in either denies, with
  conditions evaluated (aws:CurrentTime, aws:PrincipalTag/*, aws:SourceIdentity).
  An operator it does not know is an error (HTTP 500), never a silent pass.
* GET /_tessera/sessions: the recorded AssumeRole calls as JSON.
  GET /_tessera/role-policies?role=NAME: a role's inline policies as JSON.
  POST /_tessera/throttle {"session_prefix": P, "count": N}: the next N
  AssumeRole calls whose RoleSessionName starts with P fail with Throttling.

It seeds one account: users `tessera-broker` (may AssumeRole and manage the
roles' inline policies) and `tessera-admin` (everything), roles `tessera-agents`
(requires external id `tessera-test`) and `tessera-agents-revoke` (both allow s3:* on
bucket `tessera-reports`, and s3:ListAllMyBuckets), and objects in the bucket. It
listens on 127.0.0.1 on a free port and prints one JSON line: the port and the
two users' keys. It exits when its standard input closes, so it never outlives
the test process that started it.
"""

import datetime
import fnmatch
import json
import os
import re
import sys
import threading
import warnings

os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
warnings.filterwarnings("ignore", message=".*does not match an error shape.*")
os.environ.setdefault("MOTO_ALLOW_NONEXISTENT_REGION", "false")
# Buckets are in the path whatever the Host (the gateway's SigV4 test calls
# S3 by a made-up name, s3.inject.test, on loopback).
os.environ.setdefault("S3_IGNORE_SUBDOMAIN_BUCKETNAME", "true")

from moto.core.exceptions import ServiceException  # noqa: E402
from moto.core.utils import utcnow  # noqa: E402
from moto.iam import access_control  # noqa: E402
from moto.iam.models import iam_backends  # noqa: E402
from moto.moto_server.werkzeug_app import (  # noqa: E402
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.s3.models import s3_backends  # noqa: E402
from moto.sts import responses as sts_responses  # noqa: E402
from werkzeug.serving import make_server  # noqa: E402
from werkzeug.wrappers import Request, Response  # noqa: E402

ACCOUNT = "123456789012"
REGION = "us-east-1"
BUCKET = "tessera-reports"
EXTERNAL_ID = "tessera-test"

SESSIONS = {}  # access key id -> recorded AssumeRole request
LOCK = threading.Lock()
THROTTLE = {}  # RoleSessionName prefix -> AssumeRole calls still to throttle


class StsError(ServiceException):
    def __init__(self, code, message):
        super().__init__(code, message)


# ---------------------------------------------------------------- seeding


def seed():
    iam = iam_backends[ACCOUNT]["aws"]
    s3 = s3_backends[ACCOUNT]["aws"]
    keys = {}
    broker_policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": [
                    "sts:AssumeRole",
                    "sts:TagSession",
                    "sts:SetSourceIdentity",
                    "iam:GetRolePolicy",
                    "iam:PutRolePolicy",
                    "iam:DeleteRolePolicy",
                ],
                "Resource": "*",
            }
        ],
    }
    admin_policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
    }
    for name, policy in [("tessera-broker", broker_policy), ("tessera-admin", admin_policy)]:
        iam.create_user(REGION, name)
        iam.put_user_policy(name, "access", json.dumps(policy))
        key = iam.create_access_key(name)
        keys[name] = {
            "access_key_id": key.access_key_id,
            "secret_access_key": key.secret_access_key,
        }
    broker_arn = f"arn:aws:iam::{ACCOUNT}:user/tessera-broker"
    role_policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "s3:*",
                "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"],
            },
            {"Effect": "Allow", "Action": "s3:ListAllMyBuckets", "Resource": "*"},
        ],
    }
    for name, external_id in [("tessera-agents", EXTERNAL_ID), ("tessera-agents-revoke", None)]:
        statement = {
            "Effect": "Allow",
            "Principal": {"AWS": broker_arn},
            "Action": ["sts:AssumeRole", "sts:TagSession", "sts:SetSourceIdentity"],
        }
        if external_id:
            statement["Condition"] = {"StringEquals": {"sts:ExternalId": external_id}}
        trust = {"Version": "2012-10-17", "Statement": [statement]}
        iam.create_role(name, json.dumps(trust), "/", None, "", [], "3600")
        iam.put_role_policy(name, "s3-access", json.dumps(role_policy))
    s3.create_bucket(BUCKET, REGION)
    for key, body in [
        ("reports/2026/q1.csv", b"quarter,revenue\nq1,100\n"),
        ("reports/2025/q4.csv", b"quarter,revenue\nq4,90\n"),
        ("private/salaries.csv", b"name,salary\n"),
    ]:
        s3.put_object(BUCKET, key, body)
    return keys


# ---------------------------------------------------------------- AssumeRole

NAME_RE = re.compile(r"^[\w+=,.@-]{2,64}$")
TAG_RE = re.compile(r"^[\w\s.:/=+@-]*$")


def trust_allows(role, action):
    doc = json.loads(role.assume_role_policy_document)
    statements = doc["Statement"]
    if isinstance(statements, dict):
        statements = [statements]
    for st in statements:
        actions = st.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        if st.get("Effect") == "Allow" and any(fnmatch.fnmatchcase(action, a) for a in actions):
            return True
    return False


def raw_param(resp, name):
    return resp.querystring.get(name, [None])[0]


def parse_tags(resp):
    tags = {}
    i = 1
    while True:
        key = raw_param(resp, f"Tags.member.{i}.Key")
        if key is None:
            return tags
        value = raw_param(resp, f"Tags.member.{i}.Value") or ""
        if key.lower() in {k.lower() for k in tags}:
            raise StsError("InvalidParameterValue", f"duplicate tag key {key}")
        if not (1 <= len(key) <= 128 and TAG_RE.match(key)) or key.lower().startswith("aws:"):
            raise StsError("ValidationError", f"invalid tag key {key!r}")
        if len(value) > 256 or not TAG_RE.match(value):
            raise StsError("ValidationError", f"invalid tag value for {key}")
        tags[key] = value
        i += 1


original_assume_role = sts_responses.TokenResponse.assume_role


def strict_assume_role(self):
    role_arn = self._get_param("RoleArn") or ""
    session_name = self._get_param("RoleSessionName") or ""
    with LOCK:
        for prefix, remaining in THROTTLE.items():
            if remaining > 0 and session_name.startswith(prefix):
                THROTTLE[prefix] = remaining - 1
                raise StsError("Throttling", "Rate exceeded")
    policy = self._get_param("Policy")
    duration = self._get_int_param("DurationSeconds", 3600)
    source_identity = self._get_param("SourceIdentity")
    external_id = self._get_param("ExternalId")
    if not NAME_RE.match(session_name):
        raise StsError("ValidationError", "invalid RoleSessionName")
    if source_identity is not None and not NAME_RE.match(source_identity):
        raise StsError("ValidationError", "invalid SourceIdentity")
    iam = iam_backends[ACCOUNT]["aws"]
    try:
        role = iam.get_role_by_arn(role_arn)
    except Exception:
        raise StsError("AccessDenied", f"not authorized to perform sts:AssumeRole on {role_arn}")
    if not 900 <= duration <= int(role.max_session_duration or 3600):
        raise StsError("ValidationError", "DurationSeconds out of range for this role")
    if policy is not None:
        json.loads(policy)  # must be JSON
        if len(re.sub(r"\s", "", policy)) > 2048:
            raise StsError("PackedPolicyTooLarge", "session policy exceeds 2048 characters")
    trust = json.loads(role.assume_role_policy_document)
    trust_ctx = {"sts:externalid": external_id, "aws:sourceidentity": source_identity}
    trust_ctx = {k: v for k, v in trust_ctx.items() if v is not None}
    if evaluate(trust, "sts:AssumeRole", role_arn, trust_ctx) != "allow":
        raise StsError("AccessDenied", f"not authorized to perform sts:AssumeRole on {role_arn}")
    tags = parse_tags(self)
    if len(tags) > 50:
        raise StsError("ValidationError", "more than 50 session tags")
    if tags and not trust_allows(role, "sts:TagSession"):
        raise StsError("AccessDenied", "trust policy does not allow sts:TagSession")
    if source_identity and not trust_allows(role, "sts:SetSourceIdentity"):
        raise StsError("AccessDenied", "trust policy does not allow sts:SetSourceIdentity")
    result = original_assume_role(self)
    creds = result.result["Credentials"]
    with LOCK:
        SESSIONS[creds.access_key_id] = {
            "access_key_id": creds.access_key_id,
            "role_arn": role_arn,
            "session_name": session_name,
            "policy": policy,
            "duration": duration,
            "expiration": creds.expiration.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "external_id": external_id,
            "tags": tags,
            "source_identity": source_identity,
            "caller": self.get_access_key(),
        }
    return result


sts_responses.TokenResponse.assume_role = strict_assume_role


# ---------------------------------------------------------------- evaluation


class UnknownCondition(Exception):
    pass


def as_list(v):
    return v if isinstance(v, list) else [v]


def parse_time(s):
    return datetime.datetime.strptime(s.replace("Z", "+00:00"), "%Y-%m-%dT%H:%M:%S%z")


def condition_holds(op, key, expected, ctx):
    actual = ctx.get(key.lower())
    if actual is None:
        return op.endswith("IfExists") or op in ("StringNotEquals", "StringNotLike")
    op = op.removesuffix("IfExists")
    expected = as_list(expected)
    if op == "StringEquals":
        return actual in expected
    if op == "StringNotEquals":
        return actual not in expected
    if op == "StringLike":
        return any(fnmatch.fnmatchcase(actual, e) for e in expected)
    if op == "StringNotLike":
        return not any(fnmatch.fnmatchcase(actual, e) for e in expected)
    if op in ("DateLessThan", "DateGreaterThan", "DateLessThanEquals", "DateGreaterThanEquals"):
        a = parse_time(actual)
        results = []
        for e in expected:
            t = parse_time(e)
            results.append(
                {
                    "DateLessThan": a < t,
                    "DateGreaterThan": a > t,
                    "DateLessThanEquals": a <= t,
                    "DateGreaterThanEquals": a >= t,
                }[op]
            )
        return any(results)
    raise UnknownCondition(op)


def matches(patterns, value, case_insensitive):
    for p in as_list(patterns):
        if case_insensitive:
            if fnmatch.fnmatchcase(value.lower(), p.lower()):
                return True
        elif fnmatch.fnmatchcase(value, p):
            return True
    return False


def evaluate(doc, action, resource, ctx):
    """'deny', 'allow' or None for one identity or session policy."""
    statements = as_list(doc["Statement"])
    allowed = False
    for st in statements:
        if "Action" in st and not matches(st["Action"], action, True):
            continue
        if "NotAction" in st and matches(st["NotAction"], action, True):
            continue
        if "Resource" in st and not matches(st["Resource"], resource, False):
            continue
        if "NotResource" in st and matches(st["NotResource"], resource, False):
            continue
        conditions = st.get("Condition", {})
        if not all(
            condition_holds(op, key, expected, ctx)
            for op, block in conditions.items()
            for key, expected in block.items()
        ):
            continue
        if st["Effect"] == "Deny":
            return "deny"
        allowed = True
    return "allow" if allowed else None


original_check = access_control.IAMRequestBase.check_action_permitted


def strict_check_action_permitted(self, resource):
    key = self._access_key
    if not isinstance(key, access_control.AssumedRoleAccessKey):
        return original_check(self, resource)
    with LOCK:
        session = SESSIONS.get(key._access_key_id)
    if session is None:
        self._raise_access_denied()
    now = utcnow()
    if now >= parse_time(session["expiration"]).replace(tzinfo=None):
        self._raise_access_denied()
    ctx = {
        "aws:currenttime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "aws:sourceidentity": session["source_identity"],
    }
    for k, v in session["tags"].items():
        ctx[f"aws:principaltag/{k}".lower()] = v
    ctx = {k: v for k, v in ctx.items() if v is not None}
    docs = [access_control.IAMPolicy(p)._policy_json for p in key.collect_policies()]
    results = [evaluate(d, self._action, resource, ctx) for d in docs]
    session_result = (
        evaluate(json.loads(session["policy"]), self._action, resource, ctx)
        if session["policy"]
        else "allow"
    )
    if "deny" in results or session_result == "deny":
        self._raise_access_denied()
    if "allow" not in results or session_result != "allow":
        self._raise_access_denied()


access_control.IAMRequestBase.check_action_permitted = strict_check_action_permitted


# ---------------------------------------------------------------- server


def tessera_endpoints(moto_app):
    def app(environ, start_response):
        request = Request(environ)
        if not request.path.startswith("/_tessera/"):
            try:
                return moto_app(environ, start_response)
            except UnknownCondition as e:
                return Response(f"unknown condition operator {e}", 500)(environ, start_response)
        if request.path == "/_tessera/sessions":
            with LOCK:
                body = json.dumps(list(SESSIONS.values()))
        elif request.path == "/_tessera/role-policies":
            iam = iam_backends[ACCOUNT]["aws"]
            role = request.args.get("role", "")
            body = json.dumps(
                {n: json.loads(iam.get_role_policy(role, n)[1]) for n in iam.list_role_policies(role)}
            )
        elif request.path == "/_tessera/throttle" and request.method == "POST":
            spec = json.loads(request.get_data(as_text=True))
            with LOCK:
                THROTTLE[spec["session_prefix"]] = int(spec["count"])
            body = "{}"
        else:
            return Response("not found", 404)(environ, start_response)
        return Response(body, 200, mimetype="application/json")(environ, start_response)

    return app


def main():
    keys = seed()
    app = tessera_endpoints(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    port = server.server_address[1]
    os.environ["MOTO_PORT"] = str(port)
    print(json.dumps({"port": port, "account": ACCOUNT, "users": keys}), flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()  # until the test process goes away
    os._exit(0)


if __name__ == "__main__":
    main()
