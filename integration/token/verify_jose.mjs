// Verifies wisp tokens with npm `jose` (createRemoteJWKSet), through discovery, over HTTPS.
// usage: node verify_jose.mjs TOOLS_DIR ISSUER AUDIENCE TOKEN [FORGED...]
// The test CA comes from NODE_EXTRA_CA_CERTS. Exit 0 when TOKEN verifies and every FORGED fails.
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const [toolsDir, issuer, audience, token, ...forged] = process.argv.slice(2);
const require = createRequire(path.join(toolsDir, 'package.json'));
const jose = await import(pathToFileURL(require.resolve('jose')).href);

const discovery = await (await fetch(`${issuer}/.well-known/openid-configuration`)).json();
if (discovery.issuer !== issuer) throw new Error(`issuer mismatch: ${discovery.issuer}`);
const JWKS = jose.createRemoteJWKSet(new URL(discovery.jwks_uri));
const opts = { issuer, audience, algorithms: ['RS256', 'ES256'] };

let failures = 0;
const { payload, protectedHeader } = await jose.jwtVerify(token, JWKS, opts);
console.log('ok', protectedHeader.alg, payload.sub);
try {
  await jose.jwtVerify(token, JWKS, { ...opts, audience: 'someone-else' });
  console.log('ACCEPTED wrong-audience');
  failures++;
} catch (e) {
  console.log('refused wrong-audience', e.code);
}
try {
  await jose.jwtVerify(token, JWKS, { ...opts, currentDate: new Date((payload.exp + 5) * 1000) });
  console.log('ACCEPTED expired');
  failures++;
} catch (e) {
  console.log('refused expired', e.code);
}
for (const [i, tok] of forged.entries()) {
  try {
    await jose.jwtVerify(tok, JWKS, opts);
    console.log('ACCEPTED forged', i);
    failures++;
  } catch (e) {
    console.log('refused forged', i, e.code ?? e.name);
  }
}
process.exit(failures ? 1 : 0);
