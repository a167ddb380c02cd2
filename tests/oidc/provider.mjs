// A real OpenID Connect provider for Reckon's sign-in tests and for trying SSO locally
// (`node tests/oidc/provider.mjs CONFIG.json`), built on the `oidc-provider` package.
//
// CONFIG.json: {"issuer": "http://127.0.0.1:PORT", "port": PORT,
//               "clients": [{"client_id", "client_secret", "redirect_uris": [...]}],
//               "users_file": "users.json"}
// users.json (read again at every sign-in, so a test can take a group away):
//   {"alice": {"password": "...", "email": "...", "name": "...", "groups": ["reckon-operators"]}}
// The login page is this file's own form: a wrong password is refused. Consent is implied
// (Reckon is a first-party client). The provider prints "ready" once it listens.
import { readFileSync } from 'node:fs';
import { resolve, dirname } from 'node:path';

import Provider from 'oidc-provider';

const configPath = resolve(process.argv[2]);
const config = JSON.parse(readFileSync(configPath, 'utf8'));
const usersFile = resolve(dirname(configPath), config.users_file);
const users = () => JSON.parse(readFileSync(usersFile, 'utf8'));

const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

const provider = new Provider(config.issuer, {
  clients: config.clients.map((client) => ({
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
    ...client,
  })),
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
    groups: ['groups'],
  },
  scopes: ['openid', 'email', 'profile', 'groups'],
  pkce: { required: () => true },
  features: { devInteractions: { enabled: false } },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  cookies: { keys: ['reckon-test-provider-only'] },
  async findAccount(ctx, id) {
    const user = users()[id];
    if (!user) return undefined;
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          preferred_username: id,
          name: user.name || id,
          email: user.email || `${id}@example.test`,
          email_verified: true,
          groups: user.groups || [],
        };
      },
    };
  },
  // A first-party client: consent is implied for everything it asks.
  async loadExistingGrant(ctx) {
    const { client, session } = ctx.oidc;
    const grantId = ctx.oidc.result?.consent?.grantId || session.grantIdFor(client.clientId);
    if (grantId) {
      const found = await ctx.oidc.provider.Grant.find(grantId);
      if (found) return found;
    }
    const grant = new ctx.oidc.provider.Grant({ clientId: client.clientId, accountId: session.accountId });
    grant.addOIDCScope('openid email profile groups');
    await grant.save();
    return grant;
  },
});

const page = (uid, message) => `<!doctype html><html><head><title>Test identity provider</title></head><body>
<h1>Test identity provider</h1>${message ? `<p role="alert">${escape(message)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}">
<label>Username <input name="login" autofocus></label>
<label>Password <input name="password" type="password"></label>
<button type="submit">Sign in</button></form></body></html>`;

async function readForm(req) {
  let body = '';
  for await (const chunk of req) body += chunk;
  return new URLSearchParams(body);
}

provider.use(async (ctx, next) => {
  const match = ctx.path.match(/^\/interaction\/([^/]+)$/);
  if (!match) return next();
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  ctx.set('cache-control', 'no-store');
  if (ctx.method === 'GET') {
    ctx.type = 'html';
    ctx.body = page(details.uid);
    return undefined;
  }
  const form = await readForm(ctx.req);
  const login = form.get('login') || '';
  const user = users()[login];
  if (!user || user.password !== form.get('password')) {
    ctx.status = 200;
    ctx.type = 'html';
    ctx.body = page(details.uid, 'Wrong username or password.');
    return undefined;
  }
  ctx.respond = false;
  return provider.interactionFinished(ctx.req, ctx.res, { login: { accountId: login } },
    { mergeWithLastSubmission: false });
});

provider.listen(config.port, '127.0.0.1', () => {
  console.log('ready');
});
