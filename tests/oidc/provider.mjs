// A real OpenID provider for tests/access/test_oidc_sso.py: npm's oidc-provider (pinned in package.json),
// with its development interactions (a login form that takes any password for a known login, then
// a consent page), one confidential client, and ID tokens signed RS256 with a key made at start.
//
//   node tests/oidc/provider.mjs PORT
//
// Environment: OIDC_TEST_CLIENT = {"client_id", "client_secret", "redirect_uri"} (JSON);
// OIDC_TEST_ACCOUNTS = a JSON file {login: {claims}}, read again at every lookup, so a test
// changes an account's claims (its role, its organizations) between two sign-ins by rewriting it.
// The login is the account's `sub`. The claims `org` and `role` come with the scope "dashboard".
// Prints "ready <issuer>" once it listens on 127.0.0.1:PORT; stops on SIGTERM.

import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import Provider from 'oidc-provider';

const port = Number(process.argv[2] || process.env.OIDC_TEST_PORT);
if (!Number.isInteger(port) || port <= 0) {
  console.error('usage: node tests/oidc/provider.mjs PORT');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;
const client = JSON.parse(process.env.OIDC_TEST_CLIENT);
const accountsFile = process.env.OIDC_TEST_ACCOUNTS;
const accounts = () => JSON.parse(readFileSync(accountsFile, 'utf8'));

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'test-rs256', alg: 'RS256', use: 'sig' };

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: client.client_id,
      client_secret: client.client_secret,
      redirect_uris: [client.redirect_uri],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: 'RS256',
    },
  ],
  jwks: { keys: [signingKey] },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'given_name', 'family_name', 'preferred_username'],
    dashboard: ['org', 'role'],
  },
  cookies: { keys: ['tests-only-cookie-signing-key'] },
  features: { devInteractions: { enabled: true } },
  async findAccount(_ctx, sub) {
    const claims = accounts()[sub];
    if (!claims) {
      return undefined;
    }
    return { accountId: sub, claims: async () => ({ ...accounts()[sub], sub }) };
  },
});

const server = createServer(provider.callback());
server.listen(port, '127.0.0.1', () => {
  console.log(`ready ${issuer}`);
});
process.on('SIGTERM', () => {
  server.close();
  process.exit(0);
});
