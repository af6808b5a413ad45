// A real OpenID provider on loopback for the console's single sign-on tests: the certified
// `oidc-provider` package (installed by `make oidc-provider` under .cache/oidc-provider), with its
// development login form (any password) and users whose claims map to each role.
// Configured by $OIDC_CONFIG (JSON: port, client_id, client_secret, redirect_uri, users, jwks);
// prints "ready" once it listens.
import { pathToFileURL } from 'node:url';

const { default: Provider } = await import(pathToFileURL(process.env.OIDC_PROVIDER_MAIN).href);
const cfg = JSON.parse(process.env.OIDC_CONFIG);
const issuer = `http://127.0.0.1:${cfg.port}`;

const provider = new Provider(issuer, {
  clients: [{
    client_id: cfg.client_id,
    client_secret: cfg.client_secret,
    redirect_uris: [cfg.redirect_uri],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  jwks: cfg.jwks,
  scopes: ['openid', 'email', 'profile', 'groups'],
  claims: { openid: ['sub'], email: ['email'], profile: ['name'], groups: ['groups'] },
  conformIdTokenClaims: false, // the scope's claims go in the ID token itself
  findAccount: async (ctx, id) => {
    const user = cfg.users[id];
    if (!user) return undefined;
    return { accountId: id, claims: async () => ({ sub: id, ...user }) };
  },
  features: { devInteractions: { enabled: true } },
  pkce: { required: () => true },
  cookies: { keys: ['switchyard-tests-only'] },
});
provider.on('server_error', (ctx, err) => console.error('server_error', err));
provider.listen(cfg.port, '127.0.0.1', () => console.log('ready'));
