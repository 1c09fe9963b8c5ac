#!/usr/bin/env python3
"""Writes deploy/helm/wisp/values.schema.json (JSON Schema of the chart values). Edit here, then run
`deploy/helm/values-schema.py > deploy/helm/wisp/values.schema.json`; scripts/check-deploy fails when
the two disagree."""
import json
def s(t, **kw): d={"type":t}; d.update(kw); return d
S=lambda **kw: s("string",**kw)
I=lambda **kw: s("integer",**kw)
B=lambda **kw: s("boolean",**kw)
def O(props=None, required=None, extra=False, **kw):
    d={"type":"object"}
    if props is not None: d["properties"]=props; d["additionalProperties"]=extra
    if required: d["required"]=required
    d.update(kw); return d
A=lambda items, **kw: s("array", items=items, **kw)
free=O()  # free-form object
dur=S(pattern=r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$", description="Go-style duration: 90s, 5m, 24h, 1h30m")
port=I(minimum=1, maximum=65535)
img=O({"repository":S(minLength=1),"tag":S(),"pullPolicy":S(enum=["Always","IfNotPresent","Never"])},["repository"])
res=O({"requests":free,"limits":free})
pdb=O({"minAvailable":{"type":["integer","string"]},"maxUnavailable":{"type":["integer","string"]}}, minProperties=1, description="maxUnavailable, when set, wins over minAvailable")
tol=A(free)
rule=O({"apiGroups":A(S()),"apiVersions":A(S()),"resources":A(S()),"operations":A(S(enum=["CREATE","UPDATE","DELETE","CONNECT","*"])),"scope":S(enum=["Cluster","Namespaced","*"])},["apiGroups","apiVersions","resources","operations"])
hook=O({"name":S(pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),"rules":A(rule,minItems=1),
        "failurePolicy":S(enum=["Fail","Ignore"]),"timeoutSeconds":I(minimum=1,maximum=30),
        "reinvocationPolicy":S(enum=["Never","IfNeeded"]),"objectSelector":free,
        "matchConditions":A(O({"name":S(pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),"expression":S(minLength=1)},["name","expression"]),maxItems=64)},["name","rules"])
schema={
 "$schema":"https://json-schema.org/draft-07/schema#",
 "title":"wisp Helm chart values",
 **O({
  "image":O({"repository":S(minLength=1),"tag":S(),"pullPolicy":S(enum=["Always","IfNotPresent","Never"])},["repository"]),
  "imagePullSecrets":A(O({"name":S()},["name"])),
  "nameOverride":S(),"fullnameOverride":S(),
  "global":O({"logLevel":S(enum=["trace","debug","info","warn","error"]),"logFormat":S(enum=["text","json"]),"labels":O(additionalProperties=S())}),
  "issuerUrl":S(pattern="^(https://.+)?$", description="https URL or empty"),
  "nats":O({
    "enabled":B(),"image":img,"replicas":I(minimum=1),"clusterName":S(minLength=1),
    "jetstream":O({"storageSize":S(minLength=1),"storageClassName":S(),"maxFileStore":S(pattern="^[0-9]+[KMGT]?B?$"),"maxMemoryStore":S(pattern="^[0-9]+[KMGT]?B?$"),
      "replicas":I(minimum=0,maximum=5,description="Copies of every wisp bucket and stream (--jetstream-replicas); 0 = the in-chart cluster's size up to 3, or 1 with nats.external")}),
    "resources":res,
    "goRuntime":O({"gogc":I(minimum=-1,description="GOGC of nats-server: how far its heap grows past what is live before a collection (-1 = off); see docs/operations.md"),
      "memLimit":S(pattern=r"^([0-9]+(B|KiB|MiB|GiB|TiB))?$",description="GOMEMLIMIT of nats-server: collect harder when the heap nears it. Keep about 90% of resources.limits.memory; empty = none"),
      "maxProcs":s(["integer","string"],pattern="^$",minimum=1,description="GOMAXPROCS of nats-server: the cores it runs Go code on at once. Set it to the CPU limit when there is one; empty = every CPU of the node")}),
    "auth":O({"enabled":B(),"permissions":O({k:free for k in ["gateway","policy","token","populator","wispctl"]})}),
    "tls":O({"enabled":B(),"serverSecret":S(),"clientSecret":S(),"verifyClients":B()}),
    "routeTls":O({"enabled":B(),"secret":S()}),
    "external":O({"urls":S(pattern=r"^((nats|tls)://[^,\s]+)(,(nats|tls)://[^,\s]+)*$|^$"),"existingSecret":S(),"user":S(),"credsKey":S(),"caKey":S()}),
    "podDisruptionBudget":pdb}),
  "gateway":O({
    "failureMode":S(enum=["closed","open"]),"serviceAccountFailureMode":S(enum=["open","closed"]),"httpsPort":port,"metricsPort":port,
    "service":O({"type":S(enum=["ClusterIP","NodePort","LoadBalancer"]),"port":port}),
    "controller":O({"replicas":I(minimum=1),"controllers":A(S(enum=["populator","datavolumes"]),uniqueItems=True,description="run by the leading controller gateway (--controllers)"),"kubeApi":O({"qps":I(minimum=0,maximum=100000,description="--kube-api-qps: requests a second to the apiserver; 0 = no limit"),"burst":I(minimum=1,maximum=100000,description="--kube-api-burst")},["qps","burst"]),"resources":res,"nodeSelector":free,"tolerations":tol,"podDisruptionBudget":pdb}),
    "node":O({"volumeRoot":S(pattern="^/"),"kubeletDir":S(pattern="^/"),"priorityClassName":S(),"resources":res,"nodeSelector":free,"tolerations":tol,
      "natsUsers":O({"nodes":A(S(pattern="^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"))})}),
    "provisioner":O({"image":img,"timeout":dur,"resources":res}),
    "registrar":O({"image":img,"resources":res})}),
  "policy":O({"replicas":I(minimum=1),"metricsPort":port,"rules":free,"sidecarMetricsPort":I(minimum=0,maximum=65535),"resources":res,"podDisruptionBudget":pdb,"nodeSelector":free,"tolerations":tol}),
  "token":O({"replicas":I(minimum=1),"metricsPort":port,"signingAlgorithm":S(enum=["RS256","ES256"]),"keyRotationPeriod":dur,"keyPublishAhead":dur,"lifetimeJitterPercent":I(minimum=0,maximum=50),
    "keyEncryptionKey":O({"existingSecret":S()}),"policy":free,
    "clusterIssuer":O({"enabled":B(),"issuer":S(),"jwksUrl":S(pattern="^(https://.*)?$")}),
    "podProof":O({"require":B(),"issuer":S(),"jwks":S(),"jwksUrl":S(pattern="^(https://.*)?$")}),"resources":res,"podDisruptionBudget":pdb,"nodeSelector":free,"tolerations":tol}),
  "populator":O({"kind":S(enum=["Deployment","DaemonSet"]),"replicas":I(minimum=1),"workers":I(minimum=1,maximum=64),"metricsPort":port,"resources":res,"podDisruptionBudget":pdb,"nodeSelector":free,"tolerations":tol}),
  "admission":O({"failurePolicy":S(enum=["Fail","Ignore"]),"timeoutSeconds":I(minimum=1,maximum=30),
    "reinvocationPolicy":S(enum=["Never","IfNeeded"]),"excludeNamespaces":A(S()),
    "serviceAccountIdentity":O({"enabled":B(),"namespaceLabel":S(minLength=1),"namespaceLabelValue":S(),
      "failurePolicy":S(enum=["","Fail","Ignore"]),"timeoutSeconds":I(minimum=0,maximum=30)},
      description="pods-by-serviceaccount.mutate.wisp.dev: every pod CREATE of a namespace carrying the label, not already sent to pods.mutate"),
    "mutating":A(hook),"validating":A(hook)}),
  "tls":O({"mode":S(enum=["auto","certManager","generated","existingSecret"]),"existingSecret":S(),"caBundle":S(),
    "generatedValidityDays":I(minimum=1),
    "certManager":O({"issuerRef":O({"name":S(),"kind":S(enum=["Issuer","ClusterIssuer"]),"group":S()}),"duration":dur,"renewBefore":dur})}),
  "csiDriver":O({"name":S(const="csi.wisp.dev"),
    "tokenRequests":A(O({"audience":S(),"expirationSeconds":I(minimum=600)},["audience"])),
    "podProofAudience":S(),
    "fsGroupPolicy":S(enum=["None","File","ReadWriteOnceWithFSType"])}),
  "storageClass":O({"create":B(),"name":S(minLength=1),"isDefault":B(),"reclaimPolicy":S(enum=["Delete","Retain"]),
    "volumeBindingMode":S(enum=["WaitForFirstConsumer","Immediate"]),"parameters":O(additionalProperties=S())}),
  "serviceAccount":O({"annotations":O(additionalProperties=S())}),
  "networkPolicy":O({"enabled":B(),"metricsNamespaceSelector":free,"tokenEgressPorts":A(port),"populatorEgressPorts":A(port),
    "apiServerPorts":A(port),"externalNatsPorts":A(port)}),
  "monitoring":O({"serviceMonitors":O({"enabled":B(),"interval":dur,"labels":O(additionalProperties=S())}),
    "prometheusRule":O({"enabled":B(),"labels":O(additionalProperties=S())}),
    "grafanaDashboards":O({"enabled":B(),"labels":O(additionalProperties=S())})}),
  "podSecurityContext":free,
 })
}
# nats.external.urls is required when the in-chart NATS is off.
schema["allOf"]=[{"if":{"properties":{"nats":{"properties":{"enabled":{"const":False}}}}},
  "then":{"properties":{"nats":{"properties":{"external":{"properties":{"urls":{"minLength":1}},"required":["urls"]}}}}}}]
print(json.dumps(schema, indent=2))
