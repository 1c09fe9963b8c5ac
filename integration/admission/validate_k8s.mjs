// Validates one core/v1 object (Pod, PersistentVolumeClaim) read as JSON from stdin against the
// Kubernetes schema in npm kubernetes-models, plus tools/k8s-fields.mjs's unknown-field check.
//   node integration/admission/validate_k8s.mjs < pod.json   -> "ok" or the problems, exit 1
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const here = dirname(new URL(import.meta.url).pathname);
const tools = resolve(here, "../../tools");
const { unknownFields, setNodeModules } = await import(pathToFileURL(resolve(tools, "k8s-fields.mjs")));
setNodeModules(resolve(tools, "node_modules"));

const obj = JSON.parse(readFileSync(0, "utf8"));
const models = await import(
    pathToFileURL(resolve(tools, "node_modules/kubernetes-models/v1/index.js")));
const Model = models[obj.kind];
if (!Model) {
  console.error(`validate_k8s: no kubernetes-models type for v1 ${obj.kind}`);
  process.exit(2);
}
const problems = [];
try {
  new Model(obj).validate();
} catch (e) {
  problems.push(String(e.message ?? e));
}
for (const f of unknownFields(obj, resolve(tools, `node_modules/kubernetes-models/v1/${obj.kind}.d.ts`))) {
  problems.push(`unknown field ${f}`);
}
if (problems.length) {
  console.error(problems.join("\n"));
  process.exit(1);
}
console.log("ok");
