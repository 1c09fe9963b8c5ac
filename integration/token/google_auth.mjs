// Obtains an access token from wisp's STS with Google's own client library, google-auth-library's
// ExternalAccountClient, configured as a GKE / workload identity federation credential file is: a
// file credential source (the projected token) and token_url = wisp's STS. No service account
// impersonation: the STS's access token is the credential.
// usage: node google_auth.mjs TOOLS_DIR CREDENTIALS_JSON [SCOPE...]
// The test CA comes from NODE_EXTRA_CA_CERTS. Prints one JSON line {access_token, expiry_date}
// (a test-only token the test reviews at wisp) and exits 0, or prints the error and exits 1.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const [toolsDir, credentialsFile, ...scopes] = process.argv.slice(2);
const require = createRequire(path.join(toolsDir, 'package.json'));
const { ExternalAccountClient } = require('google-auth-library');

const credentials = JSON.parse(readFileSync(credentialsFile, 'utf8'));
const client = ExternalAccountClient.fromJSON({
  ...credentials,
  ...(scopes.length ? { scopes } : {}),
});
if (!client) throw new Error('not an external_account credential file');
try {
  const { token } = await client.getAccessToken();
  console.log(JSON.stringify({
    access_token: token,
    expiry_date: client.credentials.expiry_date ?? null,
  }));
} catch (e) {
  // gaxios errors carry the STS's RFC 6749 body in e.message (getErrorFromOAuthErrorResponse).
  console.log(`error: ${e.message}`);
  process.exit(1);
}
