// Unknown-field check for Kubernetes objects, the offline counterpart of kube-apiserver's strict
// field validation. kubernetes-models' JSON schemas accept any extra property, so a misspelt field
// (`mountPropogation`) would pass them; the same package's TypeScript declarations list every field
// of every type, and this module walks an object against them.
//
//   import { unknownFields } from "./k8s-fields.mjs";
//   unknownFields(obj, "node_modules/kubernetes-models/apps/v1/Deployment.d.ts")
//     -> ["spec.template.spec.containers[0].volumeMounts[1].mountPropogation"]
//
// Types it does not understand are not checked (never a false alarm): it reports only a key that
// is absent from a fully known object type.
import { readFileSync, existsSync } from "node:fs";
import { dirname, resolve } from "node:path";

const files = new Map();  // d.ts path -> { imports, main }

function parseFile(path) {
  if (files.has(path)) return files.get(path);
  const entry = { imports: new Map(), main: null, path };
  files.set(path, entry);
  if (!existsSync(path)) return entry;
  const text = readFileSync(path, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
  for (const m of text.matchAll(/import\s*\{([^}]*)\}\s*from\s*"([^"]+)"/g)) {
    for (const name of m[1].split(",").map((s) => s.trim()).filter(Boolean)) {
      const spec = m[2];
      const file = spec.startsWith(".")
        ? resolve(dirname(path), spec.replace(/\.js$/, "") + ".d.ts")
        : resolve(nodeModules, spec + ".d.ts");
      entry.imports.set(name, file);
    }
  }
  const m = /export interface (\w+)(\s+extends\s+([\w, ]+))?\s*\{/.exec(text);
  if (m) {
    const start = m.index + m[0].length;
    const p = new Parser(text, start, entry);
    const body = p.body("}");
    if (body && m[3] && /\bTypeMeta\b/.test(m[3])) {
      body.props.set("apiVersion", { k: "prim" });
      body.props.set("kind", { k: "prim" });
    }
    entry.main = body;
  }
  return entry;
}

// A small recursive-descent parser for the type expressions the generated declarations use.
class Parser {
  constructor(text, pos, entry) {
    this.t = text;
    this.i = pos;
    this.entry = entry;
  }
  ws() { while (this.i < this.t.length && /\s/.test(this.t[this.i])) this.i++; }
  peek(s) { this.ws(); return this.t.startsWith(s, this.i); }
  eat(s) { if (this.peek(s)) { this.i += s.length; return true; } return false; }
  ident() { this.ws(); const m = /^[A-Za-z_$][\w$]*/.exec(this.t.slice(this.i, this.i + 200)); if (!m) return null; this.i += m[0].length; return m[0]; }
  str() { this.ws(); const m = /^"(?:[^"\\]|\\.)*"/.exec(this.t.slice(this.i)); if (!m) return null; this.i += m[0].length; return JSON.parse(m[0]); }
  // Members until `close`: "name"?: T;  [key: string]: T;
  body(close) {
    const obj = { k: "obj", props: new Map(), index: null };
    for (let guard = 0; guard < 10000; guard++) {
      if (this.eat(close)) return obj;
      if (this.eat("[")) {
        this.ident(); this.eat(":"); this.ident(); this.eat("]"); this.eat(":");
        obj.index = this.type();
      } else {
        const name = this.str() ?? this.ident();
        if (name === null) return null;
        this.eat("?");
        if (!this.eat(":")) return null;
        obj.props.set(name, this.type());
      }
      if (!this.eat(";")) this.eat(",");
    }
    return null;
  }
  type() {
    const members = [this.primary()];
    while (this.eat("|")) members.push(this.primary());
    return members.length === 1 ? members[0] : { k: "union", of: members };
  }
  primary() {
    let t;
    if (this.eat("(")) { t = this.type(); this.eat(")"); }
    else if (this.eat("{")) t = this.body("}") ?? { k: "unknown" };
    else if (this.peek('"')) { this.str(); t = { k: "prim" }; }
    else if (/[-\d]/.test((this.ws(), this.t[this.i]))) { while (/[-\d.]/.test(this.t[this.i])) this.i++; t = { k: "prim" }; }
    else {
      const id = this.ident();
      if (id === null) return { k: "unknown" };
      if (id === "Array" && this.eat("<")) { t = { k: "array", of: this.type() }; this.eat(">"); }
      else if (["string", "number", "boolean", "null", "undefined", "true", "false"].includes(id)) t = { k: "prim" };
      else if (["any", "unknown", "object"].includes(id)) t = { k: "unknown" };
      else t = { k: "ref", file: this.entry.imports.get(id) ?? null };
      if (this.peek("[") && !this.peek("[]")) {  // IFoo["kind"]: an indexed access is a primitive
        this.eat("["); this.str(); this.eat("]");
        t = { k: "prim" };
      }
    }
    while (this.eat("[]")) t = { k: "array", of: t };
    return t;
  }
}

let nodeModules = resolve(dirname(new URL(import.meta.url).pathname), "node_modules");

function deref(t) {
  for (let depth = 0; t && t.k === "ref" && depth < 5; depth++) {
    t = t.file ? parseFile(t.file).main ?? { k: "unknown" } : { k: "unknown" };
  }
  return t;
}

function walk(value, type, path, out) {
  type = deref(type);
  if (!type || value === null || typeof value !== "object") return;
  if (type.k === "array") {
    if (Array.isArray(value)) value.forEach((v, i) => walk(v, type.of, `${path}[${i}]`, out));
    return;
  }
  if (type.k === "union") {
    const objs = type.of.map(deref);
    if (objs.some((o) => o.k !== "obj")) return;  // a primitive alternative: nothing to check
    const merged = { k: "obj", props: new Map(), index: null };
    for (const o of objs) for (const [k, v] of o.props) merged.props.set(k, v);
    type = merged;
  }
  if (type.k !== "obj" || Array.isArray(value)) return;
  for (const [k, v] of Object.entries(value)) {
    const sub = `${path ? path + "." : ""}${k}`;
    if (type.props.has(k)) walk(v, type.props.get(k), sub, out);
    else if (type.index) walk(v, type.index, sub, out);
    else out.push(sub);
  }
}

export function setNodeModules(dir) { nodeModules = dir; }

// Paths of the fields of `obj` that its type (declared in `dtsPath`) does not have.
export function unknownFields(obj, dtsPath) {
  const entry = parseFile(dtsPath);
  if (!entry.main) return null;  // no declaration found: not checked
  const out = [];
  walk(obj, entry.main, "", out);
  return out;
}
