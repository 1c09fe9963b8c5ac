// Validates Kubernetes objects the way a strict kube-apiserver would, offline:
//   - custom resources against the openAPIV3Schema of their real CRD (ajv), with the apiserver's
//     structural-schema rules: a field not in `properties` is unknown unless the schema says
//     `x-kubernetes-preserve-unknown-fields: true` (kubectl's default strict field validation
//     refuses it: "strict decoding error: unknown field ..."), `x-kubernetes-int-or-string`
//     takes an integer or a string, `x-kubernetes-embedded-resource` objects carry apiVersion,
//     kind and metadata. CEL rules (x-kubernetes-validations) are not evaluated.
//   - core kinds (Pod, PersistentVolumeClaim, ...) against npm kubernetes-models' schemas plus
//     tools/k8s-fields.mjs's unknown-field walk.
//
//   node tools/validate-k8s-objects.mjs < input.json
// Input: {"crds": [CRD objects, each with an optional "variant" string],
//         "objects": [{"where": "file:doc", "variant": "" | "VEP94-HYPOTHETICAL", "object": {...}}]}
// A custom resource is checked against the CRD of its group and kind whose variant equals the
// object's ("" = the released upstream CRD). Output: one line per problem, exit 1 if any.
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import Ajv from "ajv";
import { unknownFields, setNodeModules } from "./k8s-fields.mjs";

const here = dirname(new URL(import.meta.url).pathname);
const nodeModules = resolve(here, "node_modules");
setNodeModules(nodeModules);

const input = JSON.parse(readFileSync(0, "utf8"));

// The structural schema as the apiserver applies it, in JSON Schema terms ajv understands.
function structural(node, embedded = false) {
  if (Array.isArray(node)) return node.map((n) => structural(n));
  if (node === null || typeof node !== "object") return node;
  const out = {};
  for (const [k, v] of Object.entries(node)) {
    if (k.startsWith("x-kubernetes-") || k === "description" || k === "example") continue;
    if (k === "properties") {
      out.properties = Object.fromEntries(Object.entries(v).map(([p, s]) => [p, structural(s)]));
    } else if (k === "items" || k === "additionalProperties" || k === "not") {
      out[k] = typeof v === "object" ? structural(v) : v;
    } else if (k === "allOf" || k === "anyOf" || k === "oneOf") {
      // Structural schemas allow only value validations here, never types or properties.
      out[k] = v.map((s) => structural(s));
    } else {
      out[k] = v;
    }
  }
  if (node["x-kubernetes-int-or-string"]) {
    delete out.type;
    if (out.anyOf) out.allOf = [...(out.allOf ?? []), { anyOf: out.anyOf }];
    out.anyOf = [{ type: "integer" }, { type: "string" }];
  }
  if (node["x-kubernetes-embedded-resource"] || embedded) {
    out.properties = { apiVersion: { type: "string" }, kind: { type: "string" }, metadata: { type: "object" }, ...(out.properties ?? {}) };
  }
  const preserve = node["x-kubernetes-preserve-unknown-fields"] === true;
  if (out.type === "object" && !preserve && out.additionalProperties === undefined) {
    out.additionalProperties = false;
    out.properties = out.properties ?? {};
  }
  if (out.nullable) {
    delete out.nullable;
    if (out.type) out.type = [out.type, "null"];
  }
  return out;
}

const ajv = new Ajv({ allErrors: true, strict: false, validateFormats: false });
const validators = new Map();  // group|kind|version|variant -> validate
for (const crd of input.crds) {
  const group = crd.spec.group;
  const kind = crd.spec.names.kind;
  for (const v of crd.spec.versions) {
    const schema = structural(v.schema.openAPIV3Schema);
    schema.properties.metadata = { type: "object" };  // ObjectMeta: the apiserver's own type
    validators.set(`${group}|${kind}|${v.name}|${crd.variant ?? ""}`, ajv.compile(schema));
  }
}

// ajv's error -> the apiserver's field path ("spec.volumes[1].serviceAccount").
function fieldPath(instancePath) {
  return instancePath.split("/").slice(1).map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"))
    .reduce((acc, p) => (/^\d+$/.test(p) ? `${acc}[${p}]` : acc ? `${acc}.${p}` : p), "");
}

const problems = [];
let checked = 0;
for (const { where, variant = "", object: o } of input.objects) {
  const say = (m) => problems.push(`${where}: ${o?.kind ?? "?"} ${o?.metadata?.name ?? "?"}: ${m}`);
  if (typeof o?.apiVersion !== "string" || typeof o?.kind !== "string") {
    say("apiVersion and kind are required");
    continue;
  }
  const [group, version] = o.apiVersion.includes("/") ? o.apiVersion.split("/") : ["", o.apiVersion];
  checked++;
  if (group === "" || group.endsWith(".k8s.io") || ["apps", "batch", "policy"].includes(group)) {
    const path = group === "" ? `kubernetes-models/${version}` : `kubernetes-models/${o.apiVersion}`;
    let Model;
    try {
      Model = (await import(path))[o.kind];
    } catch {
      Model = undefined;
    }
    if (typeof Model !== "function") {
      say(`no schema for ${o.apiVersion} ${o.kind}`);
      continue;
    }
    try {
      new Model(o).validate();
    } catch (e) {
      say(`schema: ${e.message}`);
    }
    const unknown = unknownFields(o, resolve(nodeModules, path, `${o.kind}.d.ts`));
    if (unknown === null) say("unknown fields cannot be checked (no type declaration)");
    else for (const f of unknown) say(`strict decoding error: unknown field "${f}"`);
    continue;
  }
  const validate = validators.get(`${group}|${o.kind}|${version}|${variant}`);
  if (!validate) {
    say(`no CRD for ${o.apiVersion} ${o.kind}${variant ? ` (variant ${variant})` : ""}`);
    continue;
  }
  if (!validate(o)) {
    for (const e of validate.errors) {
      const f = fieldPath(e.instancePath);
      if (e.keyword === "additionalProperties") {
        say(`strict decoding error: unknown field "${f ? f + "." : ""}${e.params.additionalProperty}"`);
      } else {
        say(`${f || "<root>"}: ${e.message}`);
      }
    }
  }
}
for (const p of problems) console.log(p);
console.log(`validate-k8s-objects: ${checked} objects, ${problems.length} problem(s)`);
process.exit(problems.length ? 1 : 0);
