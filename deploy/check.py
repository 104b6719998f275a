"""Checks of deploy/ that need no cluster and no container engine.

Run by scripts/deploy-check.sh with the Python of its virtualenv (PyYAML):

  check.py lint DEPLOY_DIR
      The Deployment in DEPLOY_DIR/kubernetes/*.yaml against the Restricted Pod
      Security Standard and this project's rules (resources, probes, service
      account token, pinned image, NetworkPolicy and PodDisruptionBudget that
      select the pods, Secret files readable by the pod's user and no one else),
      and DEPLOY_DIR/Containerfile against the Deployment (exec-form entry
      point, numeric user, no mount hiding a path the image ships).

  check.py boot DEPLOY_DIR REPO BIN WORK
      Inside a private mount and network namespace (the caller's unshare): builds
      in WORK a stand-in for the container the kubelet would start, then starts
      BIN in it the way the Deployment and the Containerfile say, probes it the
      way the kubelet would, and stops it with SIGTERM. See boot() below.

Each failure is printed as `deploy-check: FAIL: ...`; the exit status is 1 if
any check failed.
"""

import atexit
import base64
import tomllib
import json
import os
import re
import secrets
import shlex
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    print(f"deploy-check: FAIL: {msg}", file=sys.stderr, flush=True)


def ok(msg):
    print(f"deploy-check: ok: {msg}", flush=True)


def finish():
    if FAILURES:
        print(f"deploy-check: {len(FAILURES)} check(s) failed", file=sys.stderr)
        sys.exit(1)


# ---------------------------------------------------------------- manifests


def load_objects(deploy_dir):
    objs = []
    files = sorted((Path(deploy_dir) / "kubernetes").glob("*.yaml"))
    if not files:
        fail(f"no manifest in {deploy_dir}/kubernetes/*.yaml")
    for f in files:
        with open(f) as fh:
            for doc in yaml.safe_load_all(fh):
                if doc:
                    objs.append(doc)
    return objs


def of_kind(objs, kind):
    return [o for o in objs if o.get("kind") == kind]


def the_deployment(objs):
    deps = of_kind(objs, "Deployment")
    if len(deps) != 1:
        fail(f"expected exactly one Deployment, found {len(deps)}")
        finish()
    return deps[0]


def selects(selector, labels):
    """Whether a LabelSelector selects an object with `labels`."""
    if not selector:
        return False  # an empty selector is "everything" in some objects: be explicit
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, vals = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in vals:
            return False
        if op == "NotIn" and labels.get(key) in vals:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def mode_of(v):
    # YAML 1.1 reads 0440 as octal (288), as the API server's decoder does.
    return int(v)


# ---------------------------------------------------------------- Containerfile


def parse_containerfile(path):
    """The final stage of a Containerfile: entrypoint, cmd, env, user, workdir,
    copies [(stage, src, dst)], and each stage's WORKDIR."""
    text = Path(path).read_text()
    lines, cur = [], ""
    for raw in text.splitlines():
        s = raw.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        lines.append(cur)
        cur = ""
    stages, stage = [], None
    for line in lines:
        instr, _, rest = line.partition(" ")
        instr, rest = instr.upper(), rest.strip()
        if instr == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stage = {"from": parts[0], "name": name, "workdir": "/", "env": {},
                     "entrypoint": None, "cmd": None, "user": None, "copies": [],
                     "entrypoint_shell": False, "cmd_shell": False}
            stages.append(stage)
            continue
        if stage is None:
            continue
        if instr in ("ENTRYPOINT", "CMD"):
            key = instr.lower()
            try:
                val = json.loads(rest)
                if not isinstance(val, list):
                    raise ValueError
                stage[key] = val
            except ValueError:
                stage[key] = ["/bin/sh", "-c", rest]
                stage[key + "_shell"] = True
            if instr == "ENTRYPOINT":
                stage["cmd"] = None  # a new ENTRYPOINT resets an inherited CMD
        elif instr == "ENV":
            toks = shlex.split(rest)
            if toks and "=" not in toks[0]:
                stage["env"][toks[0]] = " ".join(toks[1:])
            else:
                for t in toks:
                    k, _, v = t.partition("=")
                    stage["env"][k] = v
        elif instr == "EXPOSE":
            stage.setdefault("expose", []).extend(rest.split())
        elif instr == "USER":
            stage["user"] = rest
        elif instr == "WORKDIR":
            stage["workdir"] = os.path.join(stage["workdir"], rest)
        elif instr == "COPY":
            toks = shlex.split(rest)
            frm = None
            args = []
            for t in toks:
                if t.startswith("--from="):
                    frm = t.split("=", 1)[1]
                elif t.startswith("--"):
                    continue
                else:
                    args.append(t)
            for src in args[:-1]:
                stage["copies"].append((frm, src, args[-1]))
    if not stages:
        fail(f"{path}: no FROM")
        finish()
    return stages


# What the check knows of the final stage's base image: the defaults it sets
# (distroless: user nonroot = 65532, home /home/nonroot), so that what the
# Containerfile does not set is taken as the real image would.
BASE_IMAGES = {
    "gcr.io/distroless/cc-debian12:nonroot": {"user": "65532", "workdir": "/home/nonroot"},
    "gcr.io/distroless/cc-debian12": {"user": "0", "workdir": "/"},
}
# distroless's /etc/passwd
IMAGE_USERS = {"root": 0, "nonroot": 65532}


def image_config(deploy_dir):
    stages = parse_containerfile(Path(deploy_dir) / "Containerfile")
    final = stages[-1]
    base = final["from"].split("@")[0]
    if base not in BASE_IMAGES:
        fail(f"Containerfile: the final stage's base {final['from']} is not one this check knows")
        finish()
    b = BASE_IMAGES[base]
    user = final["user"] or b["user"]
    workdir = final["workdir"] if final["workdir"] != "/" else b["workdir"]
    return {"stages": stages, "final": final, "user": user, "workdir": workdir}


# ---------------------------------------------------------------- the pod as run


def effective(dep, img):
    """The container as the kubelet would run it: argv, uid/gid/groups, env
    (names and sources), the security fields, and the mounts."""
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    psc = pod.get("securityContext") or {}
    csc = c.get("securityContext") or {}
    fin = img["final"]

    # command/args replace ENTRYPOINT/CMD as the Kubernetes API documents.
    entry, cmd = fin["entrypoint"] or [], fin["cmd"] or []
    if "command" in c:
        argv = list(c["command"]) + list(c.get("args") or [])
    elif "args" in c:
        argv = list(entry) + list(c["args"])
    else:
        argv = list(entry) + list(cmd)

    def pick(key):
        return csc.get(key, psc.get(key))

    user_s = img["user"]
    img_uid, _, img_gid = user_s.partition(":")
    uid = pick("runAsUser")
    if uid is None:
        uid = int(img_uid) if img_uid.isdigit() else img_uid
    gid = pick("runAsGroup")
    if gid is None:
        # No group in USER: the user's primary group in the image's passwd
        # (distroless: the uid's own number).
        gid = int(img_gid) if img_gid.isdigit() else (
            uid if isinstance(uid, int) else IMAGE_USERS.get(uid, 0))
    groups = []
    if psc.get("fsGroup") is not None:
        groups.append(psc["fsGroup"])
    groups += list(psc.get("supplementalGroups") or [])
    return {
        "pod": pod, "container": c, "argv": argv, "uid": uid, "gid": gid,
        "groups": groups, "fsGroup": psc.get("fsGroup"),
        "runAsNonRoot": pick("runAsNonRoot"),
        "seccomp": (pick("seccompProfile") or {}).get("type"),
        "readOnlyRoot": csc.get("readOnlyRootFilesystem", False),
        "noNewPrivs": csc.get("allowPrivilegeEscalation") is False,
        "dropAll": "ALL" in ((csc.get("capabilities") or {}).get("drop") or []),
    }


def kubelet_user_check(e):
    """The kubelet's own refusal (verifyRunAsNonRoot) before it starts a container."""
    if not e["runAsNonRoot"]:
        return None
    if not isinstance(e["uid"], int):
        return (f"container has runAsNonRoot and image has non-numeric user ({e['uid']}), "
                "cannot verify user is non-root")
    if e["uid"] == 0:
        return "container's runAsUser breaks non-root policy"
    return None


def volume_files(vol, objs, secret_data, fs_group):
    """The files a configMap/secret volume holds, with the owner and mode the
    kubelet gives them: root-owned, defaultMode (or the item's mode), and with
    fsGroup set, group fsGroup and the read bits 0440 added (the kubelet's
    SetVolumeOwnership for read-only volumes). Returns [(path, bytes, uid, gid, mode)]."""
    if "configMap" in vol:
        src = vol["configMap"]
        cms = [o for o in of_kind(objs, "ConfigMap") if o["metadata"]["name"] == src["name"]]
        if not cms:
            raise CheckError(f"volume {vol['name']}: ConfigMap {src['name']} is not in the manifest")
        data = {k: v.encode() for k, v in (cms[0].get("data") or {}).items()}
    elif "secret" in vol:
        src = vol["secret"]
        data = secret_data
    else:
        raise CheckError(f"volume {vol['name']}: this check emulates configMap, secret and emptyDir volumes only")
    default_mode = mode_of(src.get("defaultMode", 0o644))
    items = src.get("items")
    if items is None:
        if "secret" in vol:
            raise CheckError(f"volume {vol['name']}: list the Secret's items, so the check knows its keys")
        items = [{"key": k, "path": k} for k in data]
    out = []
    for it in items:
        if it["key"] not in data:
            raise CheckError(f"volume {vol['name']}: key {it['key']} is not in its source")
        mode = mode_of(it.get("mode", default_mode))
        gid = 0
        if fs_group is not None:
            gid, mode = fs_group, mode | 0o440
        out.append((it["path"], data[it["key"]], 0, gid, mode))
    return out


class CheckError(Exception):
    pass


def can_read(uid, gids, fuid, fgid, mode):
    if uid == 0:
        return True
    if uid == fuid:
        return bool(mode & 0o400)
    if fgid in gids:
        return bool(mode & 0o040)
    return bool(mode & 0o004)


# ---------------------------------------------------------------- lint


RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}


def lint(deploy_dir):
    objs = load_objects(deploy_dir)
    dep = the_deployment(objs)
    img = image_config(deploy_dir)
    fin = img["final"]
    name = dep["metadata"]["name"]
    tmpl = dep["spec"]["template"]
    labels = tmpl["metadata"].get("labels") or {}
    pod = tmpl["spec"]

    if not selects(dep["spec"].get("selector"), labels):
        fail(f"Deployment {name}: its selector does not select its own pod labels")

    # -- the Restricted Pod Security Standard (pod level)
    for f in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(f):
            fail(f"Deployment {name}: {f} is set (Restricted forbids it)")
    for v in pod.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            fail(f"volume {v['name']}: type {sorted(kinds)} is not allowed by Restricted")
    if pod.get("automountServiceAccountToken") is not False:
        fail(f"Deployment {name}: automountServiceAccountToken must be false (the broker never calls the API server)")
    sa = pod.get("serviceAccountName")
    for o in of_kind(objs, "ServiceAccount"):
        if o["metadata"]["name"] == sa and o.get("automountServiceAccountToken") is not False:
            fail(f"ServiceAccount {sa}: automountServiceAccountToken must be false")

    containers = list(pod.get("containers") or []) + list(pod.get("initContainers") or [])
    psc = pod.get("securityContext") or {}
    for c in containers:
        cn = c["name"]
        csc = c.get("securityContext") or {}

        def pick(key, csc=csc):
            return csc.get(key, psc.get(key))

        if pick("runAsNonRoot") is not True:
            fail(f"container {cn}: runAsNonRoot must be true (pod or container securityContext)")
        if pick("runAsUser") == 0:
            fail(f"container {cn}: runAsUser must not be 0")
        if (pick("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
            fail(f"container {cn}: seccompProfile.type must be RuntimeDefault or Localhost")
        if csc.get("allowPrivilegeEscalation") is not False:
            fail(f"container {cn}: securityContext.allowPrivilegeEscalation must be false")
        if csc.get("privileged"):
            fail(f"container {cn}: privileged is set")
        caps = csc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            fail(f"container {cn}: securityContext.capabilities.drop must include ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            fail(f"container {cn}: capabilities.add beyond NET_BIND_SERVICE")
        if csc.get("readOnlyRootFilesystem") is not True:
            fail(f"container {cn}: securityContext.readOnlyRootFilesystem must be true")
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                fail(f"container {cn}: hostPort is set")
        res = c.get("resources") or {}
        for part, keys in (("requests", ("cpu", "memory")), ("limits", ("cpu", "memory"))):
            for k in keys:
                if not (res.get(part) or {}).get(k):
                    fail(f"container {cn}: resources.{part}.{k} is not set")
        image = c.get("image", "")
        tail = image.rsplit("/", 1)[-1]
        if "@sha256:" not in image and (":" not in tail or tail.endswith(":latest")):
            fail(f"container {cn}: image {image!r} is :latest (or untagged); pin a version or a digest")

    c = pod["containers"][0]
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
    port_numbers = set(ports.values())

    def port_of(p):
        return ports.get(p) if isinstance(p, str) else p

    want = {"startupProbe": None, "readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    for probe, path in want.items():
        pr = c.get(probe)
        if not pr:
            fail(f"container {c['name']}: no {probe}")
            continue
        hg = pr.get("httpGet")
        if not hg:
            fail(f"container {c['name']}: {probe} is not an httpGet")
            continue
        if path and hg.get("path") != path:
            fail(f"container {c['name']}: {probe} must GET {path}, not {hg.get('path')}")
        if port_of(hg.get("port")) not in port_numbers:
            fail(f"container {c['name']}: {probe} port {hg.get('port')} is not a containerPort")

    # -- the Secret's files: readable by the pod's user, by no one else
    e = effective(dep, img)
    uid = e["uid"]
    if not isinstance(uid, int):
        fail(f"the container's user {uid!r} is not numeric: runAsNonRoot cannot verify it (set runAsUser, and USER uid:gid in the Containerfile)")
        uid = IMAGE_USERS.get(uid)
    if uid is not None:
        gid = e["gid"] if isinstance(e["gid"], int) else uid
        gids = {gid, *e["groups"]}
        fake = {}
        for v in pod.get("volumes") or []:
            if "secret" in v:
                for it in v["secret"].get("items") or []:
                    fake[it["key"]] = b"x"
        for v in pod.get("volumes") or []:
            if "secret" not in v:
                continue
            try:
                files = volume_files(v, objs, fake, e["fsGroup"])
            except CheckError as err:
                fail(str(err))
                continue
            for path, _, fuid, fgid, mode in files:
                if not can_read(uid, gids, fuid, fgid, mode):
                    fail(f"secret volume {v['name']}: {path} would be {fuid}:{fgid} mode {mode:04o}, "
                         f"not readable by uid {uid} (groups {sorted(gids)}); set fsGroup and a mode with group read")
                if mode & 0o007:
                    fail(f"secret volume {v['name']}: {path} would be mode {mode:04o}, readable by any user")
        ok(f"secret files checked for {uid}:{gid} (groups {sorted(gids)})")
    for v in pod.get("volumes") or []:
        if "configMap" in v and not any(o["metadata"]["name"] == v["configMap"]["name"]
                                        for o in of_kind(objs, "ConfigMap")):
            fail(f"volume {v['name']}: ConfigMap {v['configMap']['name']} is not in the manifest")

    # -- where it listens: --listen, then TESSERA_LISTEN, then the file's listen
    def listen_of(argv, env, config_text):
        if "--listen" in argv:
            return argv[argv.index("--listen") + 1], "--listen"
        if env.get("TESSERA_LISTEN"):
            return env["TESSERA_LISTEN"], "TESSERA_LISTEN"
        if config_text is not None:
            conf = tomllib.loads(config_text)
            if "listen" in conf:
                return conf["listen"], "the config file's listen"
        return "127.0.0.1:8700", "the broker's default"

    def loopback(addr):
        host = addr.rsplit(":", 1)[0].strip("[]")
        return host.startswith("127.") or host in ("localhost", "::1")

    img_argv = (fin["entrypoint"] or []) + (fin["cmd"] or [])
    addr, why = listen_of(img_argv, fin["env"], None)
    if loopback(addr):
        fail(f"the image alone listens on {addr} ({why}): EXPOSE {' '.join(fin.get('expose', [])) or 'a port'} is unreachable")
    pod_env = dict(fin["env"])
    pod_env.update({ev["name"]: ev["value"] for ev in c.get("env") or [] if "value" in ev})
    config_text = None
    if "--config" in e["argv"]:
        cfg = e["argv"][e["argv"].index("--config") + 1]
        for m in c.get("volumeMounts") or []:
            v = next((v for v in pod.get("volumes") or [] if v["name"] == m["name"]), {})
            if "configMap" in v and cfg.startswith(m["mountPath"].rstrip("/") + "/"):
                key = cfg[len(m["mountPath"].rstrip("/")) + 1:]
                for o in of_kind(objs, "ConfigMap"):
                    if o["metadata"]["name"] == v["configMap"]["name"]:
                        config_text = (o.get("data") or {}).get(key)
    addr, why = listen_of(e["argv"], pod_env, config_text)
    if loopback(addr):
        fail(f"the pod listens on {addr} ({why}): the Service cannot reach it")

    # -- the Containerfile against the Deployment
    if fin["entrypoint_shell"] or fin["cmd_shell"]:
        fail("Containerfile: ENTRYPOINT/CMD in shell form: the distroless image has no /bin/sh")
    if not re.fullmatch(r"\d+(:\d+)?", img["user"]):
        fail(f"Containerfile: USER {img['user']!r} is not numeric uid:gid")
    argv = e["argv"]
    if argv[:1] != ["/usr/local/bin/tessera"] or argv[1:2] != ["serve"] or argv.count("serve") != 1:
        fail(f"the container would run {argv} (ENTRYPOINT {fin['entrypoint']} + the Deployment's command/args); expected /usr/local/bin/tessera serve ...")
    mounts = [m["mountPath"].rstrip("/") for m in c.get("volumeMounts") or []]
    for _, _, dst in fin["copies"]:
        for m in mounts:
            if dst.rstrip("/").startswith(m + "/"):
                fail(f"the mount at {m} hides the image's {dst}")
    if "--config" in argv:
        cfg = argv[argv.index("--config") + 1]
        if not any(cfg.startswith(m + "/") for m in mounts):
            fail(f"--config {cfg} is not in any volumeMount")

    # -- Service, NetworkPolicy, PodDisruptionBudget select these pods
    for kind in ("Service", "NetworkPolicy", "PodDisruptionBudget"):
        mine = []
        for o in of_kind(objs, kind):
            sel = o["spec"].get("podSelector") if kind == "NetworkPolicy" else o["spec"].get("selector")
            if kind == "Service":
                sel = {"matchLabels": sel} if sel else None
            if selects(sel, labels):
                mine.append(o)
        if not mine:
            fail(f"no {kind} selects the Deployment's pods {labels}")
            continue
        o = mine[0]
        if kind == "Service":
            for p in o["spec"].get("ports") or []:
                if port_of(p.get("targetPort", p.get("port"))) not in port_numbers:
                    fail(f"Service {o['metadata']['name']}: targetPort {p.get('targetPort')} is not a containerPort")
        if kind == "NetworkPolicy":
            spec = o["spec"]
            if set(spec.get("policyTypes") or []) != {"Ingress", "Egress"}:
                fail("NetworkPolicy: policyTypes must be [Ingress, Egress]")
            for rule in spec.get("ingress") or []:
                if not rule.get("from"):
                    fail("NetworkPolicy: an ingress rule without `from` admits every source")
                if not rule.get("ports"):
                    fail("NetworkPolicy: an ingress rule without `ports` admits every port")
                for p in rule.get("ports") or []:
                    if port_of(p.get("port")) not in port_numbers:
                        fail(f"NetworkPolicy: ingress port {p.get('port')} is not the broker's")
            for rule in spec.get("egress") or []:
                if not rule.get("ports"):
                    fail("NetworkPolicy: an egress rule without `ports` admits every port")
            if not spec.get("ingress"):
                fail("NetworkPolicy: no ingress rule: no client could reach the broker")
        if kind == "PodDisruptionBudget":
            spec = o["spec"]
            replicas = dep["spec"].get("replicas", 1)
            if "minAvailable" in spec:
                if not (1 <= int(spec["minAvailable"]) < replicas):
                    fail(f"PodDisruptionBudget: minAvailable {spec['minAvailable']} with {replicas} replicas "
                         "either protects nothing or blocks every drain")
            elif "maxUnavailable" not in spec:
                fail("PodDisruptionBudget: neither minAvailable nor maxUnavailable")
        ok(f"{kind} {o['metadata']['name']} selects the Deployment's pods")
    if not FAILURES:
        ok(f"Deployment {name}: Restricted fields, resources, probes, service account token, image pin, mounts")
    finish()


# ---------------------------------------------------------------- boot


def make_secret_values(keys):
    """Test values for the Secret's keys, in the formats the broker reads
    (docs/configuration.md): the KEK is the base64 of 32 bytes, the admin token
    tsr_adm_ and 43 URL-safe base64 characters; the store is SQLite in the
    check's store directory."""
    out = {}
    for k in keys:
        if k == "kek":
            out[k] = base64.b64encode(secrets.token_bytes(32)) + b"\n"
        elif k == "admin-token":
            out[k] = ("tsr_adm_" + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")).encode() + b"\n"
        elif k == "store-url":
            out[k] = f"sqlite://{CHECK_STORE_DIR}/tessera.db".encode()
        else:
            raise CheckError(f"the Secret's key {k!r}: the check does not know what to put in it")
    return out


# The one thing not taken from the manifest: the store. The Deployment's is
# PostgreSQL, named by the Secret; the check names SQLite in a writable
# emptyDir-like directory the manifest does not have.
CHECK_STORE_DIR = "/var/lib/tessera-check"


def sh(*args):
    subprocess.run(args, check=True)


def bind(src, dst, ro=True):
    sh("mount", "--bind", str(src), str(dst))
    if ro:
        sh("mount", "-o", "remount,bind,ro", str(dst))


def write_volume(base, files, fs_group, uid_of_dir=0):
    """A configMap/secret volume as the kubelet's atomic writer leaves it:
    the files in a timestamped directory, `..data` pointing at it, and one
    symbolic link per file."""
    base.mkdir(parents=True)
    ts = base / "..2025_01_01_00_00_00.000000000"
    ts.mkdir()
    for path, data, fuid, fgid, mode in files:
        p = ts / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.chown(p, fuid, fgid)
        os.chmod(p, mode)
    os.symlink(ts.name, base / "..data")
    for top in sorted({f[0].split("/")[0] for f in files}):
        os.symlink(f"..data/{top}", base / top)
    for d in (base, ts):
        if fs_group is not None:
            os.chown(d, uid_of_dir, fs_group)
            os.chmod(d, 0o2755)
        else:
            os.chmod(d, 0o755)


def http_get(url, host, timeout=2):
    req = urllib.request.Request(url, headers={"Host": host})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as err:
        return None, str(err)


def boot(deploy_dir, repo, binary, work):
    """Starts the broker as the Deployment would, in the current (private)
    mount and network namespace:

    - a root file system in WORK/root: the host's /usr/lib (glibc and the C
      runtime, what distroless/cc ships) and CA certificates, the image's COPY
      destinations (the binary BIN at /usr/local/bin/tessera, the repository's
      policy/ at /etc/tessera/policy), the passwd of the distroless image, read
      only when readOnlyRootFilesystem is set;
    - each volumeMount: ConfigMap files from the manifest, Secret files made up
      for the check, with the kubelet's ownership and modes (fsGroup, 0440);
    - the user, groups, no_new_privs and capabilities of the securityContext
      (setpriv), the image's ENV then the container's env, the image's
      ENTRYPOINT/CMD combined with the container's command/args.

    Then, like the kubelet, GETs each probe on 127.0.0.2 (standing for the pod's
    address, so a broker listening on 127.0.0.1 only fails) with the probe's
    headers, checks that a Host the config does not allow is refused, sends
    SIGTERM and expects exit status 0 within terminationGracePeriodSeconds.
    Seccomp (RuntimeDefault) is not emulated."""
    objs = load_objects(deploy_dir)
    dep = the_deployment(objs)
    img = image_config(deploy_dir)
    e = effective(dep, img)
    c, pod = e["container"], e["pod"]
    work = Path(work)
    root = work / "root"

    refusal = kubelet_user_check(e)
    if refusal:
        fail(f"the kubelet would not start the container: {refusal}")
        finish()

    # The Secret's keys, from the volumes and env that name them.
    keys = []
    for v in pod.get("volumes") or []:
        if "secret" in v:
            keys += [it["key"] for it in v["secret"].get("items") or []]
    for ev in c.get("env") or []:
        ref = (ev.get("valueFrom") or {}).get("secretKeyRef")
        if ref:
            keys.append(ref["key"])
    try:
        secret_data = make_secret_values(sorted(set(keys)))
    except CheckError as err:
        fail(str(err))
        finish()

    # -- root file system
    root.mkdir(parents=True)
    sh("mount", "-t", "tmpfs", "-o", "mode=0755,size=64m", "tessera-root", str(root))
    # Whatever happens next, nothing of the host stays reachable under WORK
    # (the host's directories are bound read-only, but a caller's rm -rf of
    # WORK must never walk into them).
    atexit.register(lambda: subprocess.run(["umount", "--lazy", str(root)]))
    for d in ("usr/lib", "usr/lib64", "usr/bin", "usr/local/bin", "etc/ssl/certs", "proc", "dev",
              "sys", "tmp", "home/nonroot"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "tmp", 0o1777)
    os.chown(root / "home/nonroot", 65532, 65532)
    os.chmod(root / "home/nonroot", 0o700)
    os.symlink("usr/lib", root / "lib")
    os.symlink("usr/lib64", root / "lib64")
    os.symlink("usr/bin", root / "bin")
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/sbin/nologin\n"
                                     "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
    (root / "etc/group").write_text("root:x:0:\nnonroot:x:65532:\n")
    bind("/usr/lib", root / "usr/lib")
    if Path("/usr/lib64").is_dir():
        bind("/usr/lib64", root / "usr/lib64")
    bind("/etc/ssl/certs", root / "etc/ssl/certs")
    # The container runtime's privilege drop, inside the root (not part of the image).
    (root / "usr/bin/setpriv").touch()
    bind(subprocess.run(["sh", "-c", "command -v setpriv"], capture_output=True, text=True, check=True).stdout.strip(),
         root / "usr/bin/setpriv")
    sh("mount", "-t", "proc", "proc", str(root / "proc"))
    sh("mount", "-t", "tmpfs", "-o", "mode=0755,size=1m", "tessera-dev", str(root / "dev"))
    for d in ("null", "zero", "full", "random", "urandom"):
        (root / "dev" / d).touch()
        bind(f"/dev/{d}", root / "dev" / d, ro=False)

    # -- the image's own files (COPY in the final stage)
    stages = {s["name"]: s for s in img["stages"] if s["name"]}
    for frm, src, dst in img["final"]["copies"]:
        if frm not in stages:
            fail(f"Containerfile: COPY --from={frm}: no such stage")
            finish()
        wd = stages[frm]["workdir"].rstrip("/")
        if src == f"{wd}/target/release/tessera":
            host = Path(binary)
        elif src.startswith(wd + "/"):
            host = Path(repo) / src[len(wd) + 1:]
        else:
            fail(f"Containerfile: COPY {src}: outside the build stage's WORKDIR {wd}")
            finish()
        if not host.exists():
            fail(f"Containerfile: COPY {src}: {host} does not exist")
            finish()
        target = root / dst.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if host.is_dir():
            target.mkdir(exist_ok=True)
        else:
            target.touch()
        bind(host.resolve(), target)
        ok(f"image: {dst} <- {host}")

    # -- the volumes
    vols = {v["name"]: v for v in pod.get("volumes") or []}
    vols["check-store"] = {"name": "check-store", "emptyDir": {}}
    mounts = list(c.get("volumeMounts") or []) + [{"name": "check-store", "mountPath": CHECK_STORE_DIR}]
    for m in mounts:
        v = vols.get(m["name"])
        if v is None:
            fail(f"volumeMount {m['name']}: no such volume")
            finish()
        if m.get("subPath"):
            fail(f"volumeMount {m['name']}: subPath is not emulated")
            finish()
        src = work / "volumes" / m["name"]
        if "emptyDir" in v:
            src.mkdir(parents=True)
            if e["fsGroup"] is not None:
                os.chown(src, 0, e["fsGroup"])
                os.chmod(src, 0o2777)
            else:
                os.chmod(src, 0o777)
            ro = bool(m.get("readOnly"))
        else:
            try:
                files = volume_files(v, objs, secret_data, e["fsGroup"])
            except CheckError as err:
                fail(str(err))
                finish()
            write_volume(src, files, e["fsGroup"])
            ro = True  # configMap and secret volumes are always read-only
            for path, _, fuid, fgid, mode in files:
                ok(f"volume {m['name']}: {m['mountPath']}/{path} {fuid}:{fgid} {mode:04o}")
        target = root / m["mountPath"].lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        bind(src, target, ro=ro)
    if e["readOnlyRoot"]:
        sh("mount", "-o", "remount,ro", str(root))

    # -- environment: the runtime's defaults, the image's ENV, the container's env
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOSTNAME": "tessera-check", "HOME": "/home/nonroot"}
    env.update(img["final"]["env"])
    cms = {o["metadata"]["name"]: o.get("data") or {} for o in of_kind(objs, "ConfigMap")}
    for ev in c.get("env") or []:
        if "value" in ev:
            env[ev["name"]] = re.sub(r"\$\((\w+)\)", lambda mt: env.get(mt.group(1), mt.group(0)), str(ev["value"]))
        elif "secretKeyRef" in (ev.get("valueFrom") or {}):
            env[ev["name"]] = secret_data[ev["valueFrom"]["secretKeyRef"]["key"]].decode().strip()
        elif "configMapKeyRef" in (ev.get("valueFrom") or {}):
            ref = ev["valueFrom"]["configMapKeyRef"]
            env[ev["name"]] = cms[ref["name"]][ref["key"]]
        else:
            fail(f"env {ev['name']}: source not emulated")
            finish()
    if c.get("envFrom"):
        fail("envFrom is not emulated")
        finish()

    argv = [re.sub(r"\$\((\w+)\)", lambda mt: env.get(mt.group(1), mt.group(0)), a) for a in e["argv"]]
    priv = ["/usr/bin/setpriv", f"--reuid={e['uid']}", f"--regid={e['gid']}"]
    priv.append("--groups=" + ",".join(str(g) for g in e["groups"]) if e["groups"] else "--clear-groups")
    if e["noNewPrivs"]:
        priv.append("--no-new-privs")
    if e["dropAll"]:
        priv += ["--inh-caps=-all", "--bounding-set=-all"]
    full = priv + ["--"] + argv
    workdir = c.get("workingDir") or img["workdir"]
    print("deploy-check: starting, as the kubelet would:", flush=True)
    print("  user:  " + f"{e['uid']}:{e['gid']} groups {e['groups']}, read-only root: {e['readOnlyRoot']}, "
          f"no_new_privs: {e['noNewPrivs']}, capabilities dropped: {e['dropAll']}", flush=True)
    print("  env:   " + " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k not in ("PATH", "HOME", "HOSTNAME")), flush=True)
    print("  argv:  " + shlex.join(argv), flush=True)
    log = open(work / "broker.log", "w+b")

    def enter():
        os.chroot(root)
        os.chdir(workdir)

    proc = subprocess.Popen(full, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=enter)

    def broker_log():
        log.flush()
        log.seek(0)
        return log.read().decode(errors="replace")

    def give_up(msg):
        fail(msg)
        print("---- broker output ----", file=sys.stderr)
        print(broker_log(), file=sys.stderr)
        print("-----------------------", file=sys.stderr)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        finish()

    ports = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}

    def probe_url(name):
        hg = c[name]["httpGet"]
        port = hg["port"]
        port = ports.get(port) if isinstance(port, str) else port
        headers = {h["name"]: h["value"] for h in hg.get("httpHeaders") or []}
        host = headers.get("Host", f"127.0.0.2:{port}")
        return f"http://127.0.0.2:{port}{hg.get('path', '/')}", host, port

    # startupProbe first (else the readinessProbe), for at most its budget
    # (and 20 s), as the kubelet would.
    first = "startupProbe" if c.get("startupProbe") else "readinessProbe"
    if not c.get(first):
        give_up("the container has neither a startupProbe nor a readinessProbe")
    url, host, port = probe_url(first)
    sp = c[first]
    budget = min(20, sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3))
    deadline = time.monotonic() + budget
    status, body = None, ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            give_up(f"the broker exited with status {proc.returncode} before answering its {first}")
        status, body = http_get(url, host)
        if status is not None and 200 <= status < 400:
            break
        time.sleep(0.25)
    else:
        give_up(f"{first} GET {url} (Host: {host}) did not succeed within {budget} s: last {status} {body[:200]}")
    ok(f"{first} GET {url} Host: {host} -> {status}")
    for name in ("readinessProbe", "livenessProbe"):
        if not c.get(name):
            continue
        url, host, _ = probe_url(name)
        status, body = http_get(url, host)
        if status is None or not 200 <= status < 400:
            give_up(f"{name} GET {url} (Host: {host}) -> {status} {body[:200]}")
        ok(f"{name} GET {url} Host: {host} -> {status} {body.strip()}")
    # From inside the pod's network namespace, as an operator would ask.
    cmd = ["curl", "-fsS", "--max-time", "2", "-H", f"Host: {host}", f"http://127.0.0.1:{port}/readyz"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        give_up(f"{shlex.join(cmd)}: exit {r.returncode} {r.stderr.strip()}")
    ok(f"{shlex.join(cmd)} -> {r.stdout.strip()}")
    status, body = http_get(f"http://127.0.0.2:{port}/readyz", "attacker.example")
    if status != 421:
        give_up(f"a Host the config does not allow (attacker.example) got {status}, not 421: is allowed_hosts set?")
    ok("Host: attacker.example -> 421 (allowed_hosts in force)")

    # readOnlyRootFilesystem: not even root writes to the image's files.
    if e["readOnlyRoot"]:
        try:
            (root / "etc" / "write-probe").write_text("x")
            give_up("the root file system is writable")
        except OSError:
            ok("root file system read-only")

    grace = pod.get("terminationGracePeriodSeconds", 30)
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        give_up(f"the broker did not exit within terminationGracePeriodSeconds ({grace} s) of SIGTERM")
    if rc != 0:
        give_up(f"after SIGTERM the broker exited with status {rc}, not 0")
    ok(f"SIGTERM -> exit 0 (grace {grace} s)")
    out = broker_log()
    for line in out.splitlines():
        if "tessera listening" in line:
            print(f"deploy-check: broker said: {line}", flush=True)
        if '"level":"WARN"' in line or '"level":"ERROR"' in line or " WARN " in line or " ERROR " in line:
            print(f"deploy-check: broker said: {line}", flush=True)
    finish()


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "lint":
        lint(sys.argv[2])
    elif len(sys.argv) == 6 and sys.argv[1] == "boot":
        boot(*sys.argv[2:])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
