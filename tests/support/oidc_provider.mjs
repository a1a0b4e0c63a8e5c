// An OpenID Connect provider for the sign-in tests: panva's oidc-provider (a certified OpenID
// Provider library, package.json), with a login form that checks each person's password and
// grants the hub's scopes without a consent page. Usage:
//   node oidc_provider.mjs PORT '{"people": {"ada": {"password": "...", "groups": ["tas"]}},
//                                 "client": {"client_id": "...", "client_secret": "...",
//                                            "redirect_uris": ["http://.../hub/oauth_callback"]}}'
// Prints "listening" once it serves.
import http from "node:http";
import Provider from "oidc-provider";

const port = Number(process.argv[2]);
const { people, client } = JSON.parse(process.argv[3]);
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  clients: [{ ...client, grant_types: ["authorization_code"], response_types: ["code"] }],
  claims: { openid: ["sub"], profile: ["preferred_username", "groups"] },
  scopes: ["openid", "profile"],
  features: { devInteractions: { enabled: false } },
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(_ctx, id) {
    if (!people[id]) return undefined;
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: id, groups: people[id].groups };
      },
    };
  },
  pkce: { required: () => false },
});
provider.proxy = false;

function form(uid, message) {
  return `<!doctype html><html><body><p class="message">${message}</p>
<form method="post" action="/interaction/${uid}">
<input name="login"><input name="password" type="password"><button>Sign in</button>
</form></body></html>`;
}

async function body(req) {
  let text = "";
  for await (const chunk of req) text += chunk;
  return Object.fromEntries(new URLSearchParams(text));
}

async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  if (details.prompt.name === "consent") {
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
    grant.addOIDCScope(details.params.scope);
    const grantId = await grant.save();
    return provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
  }
  if (req.method === "GET") {
    res.writeHead(200, { "content-type": "text/html" });
    return res.end(form(details.uid, "Sign in"));
  }
  const { login, password } = await body(req);
  if (!people[login] || people[login].password !== password) {
    res.writeHead(200, { "content-type": "text/html" });
    return res.end(form(details.uid, "Wrong user name or password"));
  }
  return provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
}

const callback = provider.callback();
http
  .createServer((req, res) => {
    if (req.url.startsWith("/interaction/")) {
      interaction(req, res).catch((err) => {
        res.writeHead(500);
        res.end(String(err));
      });
      return;
    }
    callback(req, res);
  })
  .listen(port, "127.0.0.1", () => console.log("listening"));
