// Validates rendered Kubernetes manifests offline against the Kubernetes JSON schemas shipped in
// npm `kubernetes-models` (plus the prometheus-operator and cert-manager CRD models), then checks
// what schemas cannot see: duplicate objects, selectors that select nothing, references to
// ServiceAccounts, ConfigMaps, Secrets and volumes that do not exist.
//
//   node tools/validate-manifests.mjs [--external-secret NAME]... < manifests.json
//
// Input: a JSON array of objects (scripts/check-deploy turns `helm template` YAML into it).
// Output: one line per problem naming the object and the field; exit 1 if any, else 0 and a summary.
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { unknownFields } from "./k8s-fields.mjs";

const args = process.argv.slice(2);
const externalSecrets = new Set();
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--external-secret" && i + 1 < args.length) externalSecrets.add(args[++i]);
  else {
    console.error(`validate-manifests: unknown argument ${args[i]}`);
    process.exit(2);
  }
}

let docs;
try {
  docs = JSON.parse(readFileSync(0, "utf8"));
} catch (e) {
  console.error(`validate-manifests: input is not a JSON array: ${e.message}`);
  process.exit(2);
}
if (!Array.isArray(docs)) {
  console.error("validate-manifests: input is not a JSON array");
  process.exit(2);
}

const crdModules = {
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
  "cert-manager.io": "@kubernetes-models/cert-manager",
};
function modulePath(apiVersion) {
  const slash = apiVersion.indexOf("/");
  if (slash < 0) return `kubernetes-models/${apiVersion}`;  // core group: "v1"
  const group = apiVersion.slice(0, slash);
  if (crdModules[group]) return `${crdModules[group]}/${apiVersion}`;
  return `kubernetes-models/${apiVersion}`;
}

const clusterScoped = new Set([
  "ClusterRole", "ClusterRoleBinding", "CSIDriver", "StorageClass", "MutatingWebhookConfiguration",
  "ValidatingWebhookConfiguration", "Namespace", "PriorityClass", "ClusterIssuer",
  "CustomResourceDefinition", "PersistentVolume",
]);
const dns1123Subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const dns1123Label = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

const problems = [];
const where = (d) => `${d?.kind ?? "?"}/${d?.metadata?.namespace ? d.metadata.namespace + "/" : ""}${d?.metadata?.name ?? "?"}`;
const problem = (d, msg) => problems.push(`${where(d)}: ${msg}`);

const nodeModules = resolve(dirname(new URL(import.meta.url).pathname), "node_modules");
let strictChecked = 0;

// 1. Schemas, then unknown fields (what kube-apiserver's strict field validation refuses).
const seen = new Map();
for (const d of docs) {
  if (d === null || typeof d !== "object") continue;
  if (typeof d.apiVersion !== "string" || typeof d.kind !== "string") {
    problem(d, "apiVersion and kind are required");
    continue;
  }
  let mod;
  try {
    mod = await import(modulePath(d.apiVersion));
  } catch {
    problem(d, `no schema for apiVersion ${d.apiVersion}`);
    continue;
  }
  const Model = mod[d.kind];
  if (typeof Model !== "function") {
    problem(d, `kind ${d.kind} does not exist in ${d.apiVersion}`);
    continue;
  }
  try {
    new Model(d).validate();
  } catch (e) {
    problem(d, `schema: ${e.message}`);
  }
  const unknown = unknownFields(d, resolve(nodeModules, modulePath(d.apiVersion), `${d.kind}.d.ts`));
  if (unknown === null) {
    problem(d, `no type declaration for ${d.apiVersion} ${d.kind}: unknown fields cannot be checked`);
  } else {
    strictChecked++;
    for (const f of unknown) problem(d, `unknown field ${f}`);
  }
  const name = d.metadata?.name;
  if (typeof name !== "string" || !dns1123Subdomain.test(name) || name.length > 253) {
    problem(d, `metadata.name ${JSON.stringify(name)} is not a DNS-1123 subdomain`);
  }
  const ns = d.metadata?.namespace;
  if (clusterScoped.has(d.kind) && ns) problem(d, "metadata.namespace set on a cluster-scoped kind");
  if (!clusterScoped.has(d.kind) && !ns) problem(d, "metadata.namespace missing on a namespaced kind");
  for (const [k, v] of Object.entries(d.metadata?.labels ?? {})) {
    if (typeof v !== "string" || v.length > 63) problem(d, `metadata.labels.${k}: value must be a string of at most 63 characters`);
  }
  const key = `${d.apiVersion.split("/")[0]}|${d.kind}|${ns ?? ""}|${name}`;
  if (seen.has(key)) problem(d, "rendered twice");
  seen.set(key, d);
}

// 2. Cross-object references.
const byKind = (kind) => docs.filter((d) => d?.kind === kind);
const names = (kind) => new Set(byKind(kind).map((d) => `${d.metadata?.namespace}/${d.metadata?.name}`));
const serviceAccounts = names("ServiceAccount");
const configMaps = names("ConfigMap");
const secrets = names("Secret");
const certSecrets = new Set(byKind("Certificate").map((d) => `${d.metadata?.namespace}/${d.spec?.secretName}`));
const matches = (selector, labels) =>
  Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);

const workloads = docs.filter((d) => ["Deployment", "DaemonSet", "StatefulSet"].includes(d?.kind));
for (const w of workloads) {
  const ns = w.metadata?.namespace;
  const tpl = w.spec?.template;
  if (!matches(w.spec?.selector?.matchLabels, tpl?.metadata?.labels)) {
    problem(w, "spec.selector.matchLabels does not match spec.template.metadata.labels");
  }
  const pod = tpl?.spec ?? {};
  const sa = pod.serviceAccountName;
  if (sa && !serviceAccounts.has(`${ns}/${sa}`)) problem(w, `serviceAccountName ${sa} is not rendered`);
  const volumes = new Map((pod.volumes ?? []).map((v) => [v.name, v]));
  if (volumes.size !== (pod.volumes ?? []).length) problem(w, "duplicate volume names");
  const claimNames = new Set((w.spec?.volumeClaimTemplates ?? []).map((c) => c.metadata?.name));
  for (const v of volumes.values()) {
    if (v.configMap && !configMaps.has(`${ns}/${v.configMap.name}`)) problem(w, `volume ${v.name}: ConfigMap ${v.configMap.name} is not rendered`);
    const s = v.secret?.secretName;
    if (s && !secrets.has(`${ns}/${s}`) && !certSecrets.has(`${ns}/${s}`) && !externalSecrets.has(s)) {
      problem(w, `volume ${v.name}: Secret ${s} is neither rendered, issued by a Certificate, nor declared external`);
    }
  }
  const containers = [...(pod.initContainers ?? []), ...(pod.containers ?? [])];
  const cnames = new Set();
  for (const c of containers) {
    if (cnames.has(c.name)) problem(w, `container name ${c.name} used twice`);
    cnames.add(c.name);
    for (const m of c.volumeMounts ?? []) {
      if (!volumes.has(m.name) && !claimNames.has(m.name)) problem(w, `container ${c.name}: volumeMount ${m.name} names no volume`);
      if (m.mountPropagation === "Bidirectional" && c.securityContext?.privileged !== true) {
        problem(w, `container ${c.name}: Bidirectional mount propagation needs a privileged container`);
      }
    }
    for (const p of c.ports ?? []) {
      if (p.name && (!dns1123Label.test(p.name) || p.name.length > 15)) problem(w, `container ${c.name}: port name ${p.name} is not an IANA service name`);
    }
    for (const probe of ["livenessProbe", "readinessProbe", "startupProbe"]) {
      const port = c[probe]?.httpGet?.port;
      if (typeof port === "string" && !(c.ports ?? []).some((p) => p.name === port)) {
        problem(w, `container ${c.name}: ${probe} uses port ${port}, which the container does not declare`);
      }
    }
    for (const e of c.env ?? []) {
      const ref = e.valueFrom?.secretKeyRef?.name;
      if (ref && !secrets.has(`${ns}/${ref}`) && !externalSecrets.has(ref)) problem(w, `container ${c.name}: env ${e.name} reads Secret ${ref}, which is neither rendered nor declared external`);
    }
  }
}

for (const s of byKind("Service")) {
  const sel = s.spec?.selector;
  if (!sel) continue;
  const backs = workloads.filter((w) => w.metadata?.namespace === s.metadata?.namespace && matches(sel, w.spec?.template?.metadata?.labels));
  if (backs.length === 0) problem(s, "spec.selector selects no rendered workload");
  for (const p of s.spec?.ports ?? []) {
    if (typeof p.targetPort !== "string") continue;
    const named = backs.some((w) => (w.spec.template.spec.containers ?? []).some((c) => (c.ports ?? []).some((cp) => cp.name === p.targetPort)));
    if (backs.length && !named) problem(s, `port ${p.name}: targetPort ${p.targetPort} is not a container port of the selected pods`);
  }
}

for (const pdb of byKind("PodDisruptionBudget")) {
  const sel = pdb.spec?.selector?.matchLabels;
  if (!workloads.some((w) => matches(sel, w.spec?.template?.metadata?.labels))) problem(pdb, "selector selects no rendered workload");
}

for (const sm of byKind("ServiceMonitor")) {
  const sel = sm.spec?.selector?.matchLabels;
  const svcs = byKind("Service").filter((s) => matches(sel, s.metadata?.labels));
  if (svcs.length === 0) problem(sm, "selects no rendered Service");
  for (const ep of sm.spec?.endpoints ?? []) {
    if (!svcs.some((s) => (s.spec?.ports ?? []).some((p) => p.name === ep.port))) problem(sm, `endpoint port ${ep.port} is no port of the selected Services`);
  }
}

for (const kind of ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]) {
  for (const wh of byKind(kind)) {
    for (const h of wh.webhooks ?? []) {
      const svc = h.clientConfig?.service;
      if (svc && !byKind("Service").some((s) => s.metadata?.name === svc.name && s.metadata?.namespace === svc.namespace && (s.spec?.ports ?? []).some((p) => p.port === (svc.port ?? 443)))) {
        problem(wh, `webhook ${h.name}: clientConfig.service ${svc.namespace}/${svc.name}:${svc.port} is not a rendered Service port`);
      }
      const ca = h.clientConfig?.caBundle;
      if (ca !== undefined && !/^[A-Za-z0-9+/]+={0,2}$/.test(ca)) problem(wh, `webhook ${h.name}: caBundle is not base64`);
      if (!ca && !wh.metadata?.annotations?.["cert-manager.io/inject-ca-from"]) problem(wh, `webhook ${h.name}: no caBundle and no cert-manager CA injection`);
    }
  }
}

for (const b of [...byKind("RoleBinding"), ...byKind("ClusterRoleBinding")]) {
  const roleKind = b.roleRef?.kind;
  if (!docs.some((d) => d?.kind === roleKind && d.metadata?.name === b.roleRef?.name)) problem(b, `roleRef ${roleKind} ${b.roleRef?.name} is not rendered`);
  for (const s of b.subjects ?? []) {
    if (s.kind === "ServiceAccount" && !serviceAccounts.has(`${s.namespace}/${s.name}`)) problem(b, `subject ServiceAccount ${s.namespace}/${s.name} is not rendered`);
  }
}

if (problems.length) {
  for (const p of problems) console.log(p);
  console.log(`validate-manifests: ${problems.length} problem(s) in ${docs.length} objects`);
  process.exit(1);
}
const kinds = [...new Set(docs.map((d) => d?.kind))].sort().join(", ");
console.log(`validate-manifests: ${docs.length} objects valid, ${strictChecked} checked for unknown fields (${kinds})`);
