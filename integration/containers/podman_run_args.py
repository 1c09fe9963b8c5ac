#!/usr/bin/python3
"""Turns one Kubernetes container spec (the wisp-sidecar that /mutate injected) into the arguments of
`podman run`, with the kubelet's semantics, so that the container runs as a pod would run it:

- `command` replaces the image's ENTRYPOINT (podman: --entrypoint, which also drops the image's CMD,
  as Kubernetes does); `args` replace CMD (positional arguments after the image). Neither: both of
  the image's stay.
- securityContext: runAsUser/runAsGroup, readOnlyRootFilesystem, allowPrivilegeEscalation,
  capabilities; env (plain values); resources.limits memory and cpu.
- volumeMounts, from the pod volumes the same patch adds: a projected serviceAccountToken volume is a
  directory holding the stand-in token file at the source's `path` (the kubelet writes the real one);
  an emptyDir is a fresh directory. readOnly mounts are read-only.
- The gateway's CA: at the path of --ca-file when the spec passes one, else in place of the image's
  trust store (/etc/ssl/certs/ca-certificates.crt), standing in for a CA the node trusts.

  podman_run_args.py SPEC.json --pod-dir DIR --token-file FILE --ca CA.pem --network NET --name NAME

SPEC.json: {"container": {...}, "volumes": [...]}. Prints the arguments NUL-separated (for
`mapfile -d ''`) and writes DIR/socket-path: the host path of the socket given by --socket.
Anything the translation does not know fails with a message naming the field.
"""
import argparse
import json
import os
import shutil
import sys


def fail(msg):
    sys.exit("podman_run_args: " + msg)


def quantity_bytes(q):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "k": 1000, "M": 1000**2, "G": 1000**3}
    for u, m in units.items():
        if q.endswith(u):
            return int(float(q[: -len(u)]) * m)
    return int(q)


def cpus(q):
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def main():
    ap = argparse.ArgumentParser()
    for flag in ("--pod-dir", "--token-file", "--ca", "--network", "--name"):
        ap.add_argument(flag, required=True)
    ap.add_argument("spec")
    a = ap.parse_args()
    spec = json.load(open(a.spec))
    c, volumes = spec["container"], {v["name"]: v for v in spec["volumes"]}
    out = ["--name=" + a.name, "--network=" + a.network, "--pull=never"]

    sc = c.get("securityContext", {})
    if "runAsUser" in sc:
        out.append("--user=%d%s" % (sc["runAsUser"],
                                    ":%d" % sc["runAsGroup"] if "runAsGroup" in sc else ""))
    if sc.get("runAsNonRoot") and sc.get("runAsUser") == 0:
        fail("securityContext: runAsNonRoot with runAsUser 0")
    if sc.get("readOnlyRootFilesystem"):
        out.append("--read-only")
    if sc.get("allowPrivilegeEscalation") is False:
        out.append("--security-opt=no-new-privileges")
    if sc.get("privileged"):
        fail("securityContext.privileged: not expected in the injected sidecar")
    caps = sc.get("capabilities", {})
    out += ["--cap-drop=" + x.lower() for x in caps.get("drop", [])]
    out += ["--cap-add=" + x.lower() for x in caps.get("add", [])]

    for e in c.get("env", []):
        if "value" not in e:
            fail("env[%s]: only plain values are translated" % e.get("name"))
        out.append("--env=%s=%s" % (e["name"], e["value"]))
    limits = c.get("resources", {}).get("limits", {})
    if "memory" in limits:
        out.append("--memory=%d" % quantity_bytes(limits["memory"]))
    if "cpu" in limits:
        out.append("--cpus=%g" % cpus(limits["cpu"]))

    args = c.get("args", [])
    host_of = {}  # mountPath -> host directory
    for m in c.get("volumeMounts", []):
        v = volumes.get(m["name"])
        if v is None:
            fail("volumeMounts[%s]: no such volume in the patch" % m["name"])
        host = os.path.join(a.pod_dir, m["name"])
        os.makedirs(host, exist_ok=True)
        if "projected" in v:
            for s in v["projected"]["sources"]:
                if "serviceAccountToken" not in s:
                    fail("volumes[%s]: only serviceAccountToken sources are translated" % m["name"])
                dest = os.path.join(host, s["serviceAccountToken"]["path"])
                shutil.copyfile(a.token_file, dest)
                os.chmod(dest, 0o644)  # the kubelet's default mode for projected files
        elif "emptyDir" in v:
            os.chmod(host, 0o777)  # as the kubelet makes an emptyDir
        else:
            fail("volumes[%s]: only projected and emptyDir volumes are translated" % m["name"])
        out.append("--volume=%s:%s%s" % (host, m["mountPath"], ":ro" if m.get("readOnly") else ""))
        host_of[m["mountPath"]] = host

    ca_dest = next((x.split("=", 1)[1] for x in args if x.startswith("--ca-file=")), None)
    out.append("--volume=%s:%s:ro" % (a.ca, ca_dest or "/etc/ssl/certs/ca-certificates.crt"))

    socket = next((x.split("=", 1)[1] for x in args if x.startswith("--socket=")), None)
    if socket is None:
        fail("args: no --socket=")
    mount = max((p for p in host_of if socket.startswith(p.rstrip("/") + "/")), key=len,
                default=None)
    if mount is None:
        fail("args: --socket=%s is on no mounted volume" % socket)
    with open(os.path.join(a.pod_dir, "socket-path"), "w") as f:
        f.write(os.path.join(host_of[mount], os.path.relpath(socket, mount)))

    if "command" in c:
        out.append("--entrypoint=" + json.dumps(c["command"]))
    out.append(c["image"])
    out += args
    sys.stdout.write("".join(x + "\0" for x in out))


if __name__ == "__main__":
    main()
