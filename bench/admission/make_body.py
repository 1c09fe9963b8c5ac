#!/usr/bin/python3
"""Writes a realistic ~4 KiB AdmissionReview (a hostNetwork pod asking for the token sidecar)."""
import json
import sys

containers = []
for i, name in enumerate(["loader", "prefetch", "metrics-agent"]):
    containers.append({
        "name": name,
        "image": "registry.example/ml/%s:2.3.%d" % (name, i),
        "args": ["--bucket", "training-data", "--threads", "32", "--log-level", "info"],
        "env": [{"name": "SHARD_%d" % j, "value": "s3://training-data/shard-%04d" % j}
                for j in range(8)],
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
        "volumeMounts": [{"name": "training-data", "mountPath": "/data", "readOnly": True},
                         {"name": "scratch", "mountPath": "/scratch"}],
        "ports": [{"containerPort": 9000 + i, "name": "p%d" % i}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 9000 + i},
                           "periodSeconds": 10},
    })
pod = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "data-loader-7d9f8", "namespace": "ml",
                 "labels": {"app": "data-loader", "team": "ml-platform", "tier": "batch"},
                 "annotations": {"wisp.dev/token-sidecar": "true",
                                 "wisp.dev/sidecar-memory-limit": "1Gi"}},
    "spec": {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet",
             "serviceAccountName": "data-loader", "nodeSelector": {"pool": "gpu"},
             "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
             "containers": containers,
             "volumes": [{"name": "training-data",
                          "csi": {"driver": "csi.wisp.dev", "readOnly": True,
                                  "volumeAttributes": {"bucketName": "training-data",
                                                       "identityProvider": "ml-pool.svc.id.goog"}}},
                         {"name": "scratch", "emptyDir": {"sizeLimit": "20Gi"}}]},
}
review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "request": {"uid": "b6c4f0e2-1c1e-4d1b-9a53-2f0e7c9d1a11",
                      "kind": {"group": "", "version": "v1", "kind": "Pod"},
                      "resource": {"group": "", "version": "v1", "resource": "pods"},
                      "operation": "CREATE", "namespace": "ml", "name": "data-loader-7d9f8",
                      "userInfo": {"username": "system:serviceaccount:kube-system:job-controller",
                                   "uid": "4b1c", "groups": ["system:serviceaccounts",
                                                             "system:authenticated"]},
                      "object": pod, "dryRun": False}}
json.dump(review, sys.stdout, separators=(",", ":"))
