// The console's pages: overview, usage explorer, deployments; hash routing; sign out.
"use strict";

(() => {
const {api, el, table, guarded, usd, ms, num, utc, toInstant, formValues} = window.Core;
const {barChart} = window.Charts;
let range = "24h";
let depTimer = null;

// -- overview ------------------------------------------------------------------------------
const PER = {minute: "per minute", hour: "per hour", day: "per day"};
// A request refused before its model was resolved (no key, a bad body, an unknown model) is
// recorded under no model: named as such, not a blank row.
const modelCell = m => m ? m : el("span", {class: "nomodel"}, "(refused before routing)");
const SIDES = {upstream: "upstream (a deployment was called)", refused: "refused by the gateway",
               gateway: "gateway (no deployment called)"};

async function loadOverview() {
  const o = await api("GET", `/admin/overview?range=${range}`);
  document.querySelectorAll("[data-range]").forEach(b => b.classList.toggle("on", b.dataset.range === range));
  // The store keeps daily sums, and minute sums for the last two hours: without the ledger the
  // last day shows whole UTC days.
  document.getElementById("ov-source").textContent = o.source === "ledger"
    ? `from the usage ledger, ${PER[o.bucket]}`
    : `from the store's aggregates, ${PER[o.bucket]}${o.bucket === "day" && range === "24h" ? " (whole UTC days: add a ledger for hours)" : ""}`;
  document.querySelectorAll("#page-overview .bucket").forEach(e => { e.textContent = `(${PER[o.bucket]}, ${o.timezone})`; });
  const t = o.total;
  const unauth = Object.values(o.unauthenticated).reduce((a, b) => a + b, 0);
  document.getElementById("stat-requests").textContent = num(t.requests);
  document.getElementById("stat-errors").textContent = num(t.errors);
  document.getElementById("stat-refused").textContent = num(t.refused);
  document.getElementById("stat-unauth").textContent = num(unauth);
  document.getElementById("stat-tokens").textContent = num(t.total_tokens);
  document.getElementById("stat-spend").replaceChildren(spend(t));
  const hits = t.cache_hits || 0;
  document.getElementById("stat-cache-hits").textContent =
    t.requests ? `${num(hits)} (${(100 * hits / t.requests).toFixed(1)}%)` : num(hits);
  document.getElementById("stat-cache-saved").textContent = usd(t.saved_usd || 0);
  document.getElementById("stat-latency").textContent = `${ms(o.latency.p50_ms)} / ${ms(o.latency.p95_ms)}`;
  document.getElementById("stat-ttfb").textContent = `${ms(o.latency.ttfb_p50_ms)} / ${ms(o.latency.ttfb_p95_ms)}`;
  document.getElementById("stat-inflight").textContent = o.inflight === null ? "—" : num(o.inflight);
  const labels = o.series.map(s => s.t);
  barChart(document.getElementById("chart-requests"), labels, [
    {name: "answered", cls: "s-ok", values: o.series.map(s => s.requests - s.errors)},
    {name: "errors", cls: "s-err", values: o.series.map(s => s.errors - s.refused)},
    {name: "refused", cls: "s-refused", values: o.series.map(s => s.refused)}], {integer: true});
  barChart(document.getElementById("chart-tokens"), labels, [
    // Cache reads and writes are parts of the prompt: stacked apart, the bar still totals prompt + completion.
    {name: "prompt", cls: "s-prompt",
     values: o.series.map(s => Math.max(s.prompt_tokens - (s.cached_tokens || 0) - (s.cache_write_tokens || 0), 0))},
    {name: "cache read", cls: "s-cache-read", values: o.series.map(s => s.cached_tokens || 0)},
    {name: "cache write", cls: "s-cache-write", values: o.series.map(s => s.cache_write_tokens || 0)},
    {name: "completion", cls: "s-completion", values: o.series.map(s => s.completion_tokens)}], {integer: true});
  barChart(document.getElementById("chart-spend"), labels, [
    {name: "spend (USD)", cls: "s-spend", values: o.series.map(s => s.cost_usd)}], {fmt: usd});
  table(document.getElementById("ov-errors"), [["Side", r => el("span", {"data-side": r.side}, SIDES[r.side] || r.side)],
    ["Status", r => String(r.status)], ["Deployment", r => r.deployment || "-"], ["Errors", r => num(r.errors)]],
        o.errors.data);
  document.getElementById("ov-errors-note").textContent = o.errors.sampled
    ? "(from each team's newest records: add a ledger for the whole range)" : "";
  const cols = name => [[name, r => name === "model" ? modelCell(r[name]) : r[name]], ["Requests", r => num(r.requests)], ["Errors", r => num(r.errors)],
                        ["Refused", r => num(r.refused)], ["Tokens", r => num(r.total_tokens)],
                        ["Spend", spend]];
  table(document.getElementById("ov-models"), cols("model"), o.by_model);
  table(document.getElementById("ov-teams"), cols("team"), o.by_team);
  const amount = (x, v) => x.limit.startsWith("spend") ? usd(v) : num(v);
  table(document.getElementById("ov-budgets"), [["Scope", b => b.scope], ["Budget", b => el("code", {}, b.limit)],
    ["Period", b => b.period], ["Used", b => amount(b, b.used)], ["Limit", b => amount(b, b.limit_value)],
    ["Full", b => el("span", {class: b.fraction >= 1 ? "error" : "", "data-fraction": String(b.fraction)},
                     `${Math.round(b.fraction * 100)}%`)]], o.budgets || []);
  table(document.getElementById("ov-month"), [["Team", m => m.team], ["Month to date", m => usd(m.spend_usd)],
    ["Month-end projection", m => usd(m.projected_usd)], ["Days", m => `${m.days} of ${m.days_in_month}`]],
    o.month || []);
  table(document.getElementById("ov-refused-now"), [["Team", r => r.team], ["Key", r => r.key],
    ["Reason", r => el("code", {}, r.reason || "-")], ["Refused", r => num(r.refused)],
    ["Last (UTC)", r => r.last.slice(11, 19)]], o.refused_now);
  const reasons = o.refused.some(r => r.reason);
  table(document.getElementById("ov-refused"), [["Team", r => r.team], ["Key", r => r.key],
    ...(reasons ? [["Reason", r => el("code", {}, r.reason)]] : []), ["Refused", r => num(r.refused)]], o.refused);
  table(document.getElementById("ov-unauth"), [["Reason", r => el("code", {}, r[0])], ["Requests", r => num(r[1])]],
        Object.entries(o.unauthenticated));
  table(document.getElementById("ov-guardrails"), [["Guardrail", r => el("code", {}, r.guardrail)],
    ["Requests", r => num(r.requests)]], o.guardrails || []);
}

// Spend, flagged with the requests that had no price (not in the sum): never a plain $0.
function unpricedFlag(n) {
  return el("span", {class: "unpriced", "data-unpriced": String(n),
                     title: `${n} request(s) served by a deployment without a known price (no models[].price, not in the price catalog): not in this spend`},
            `${num(n)} unpriced`);
}

function spend(x) {
  return x.unpriced ? el("span", {}, usd(x.cost_usd), " + ", unpricedFlag(x.unpriced)) : usd(x.cost_usd);
}

// -- usage explorer ------------------------------------------------------------------------
const cursors = [""];  // cursors[i]: the cursor that loads page i
let pageNo = 0;

function usageParams() {
  const v = formValues(document.getElementById("usage-form"));
  const q = new URLSearchParams();
  for (const k of ["team", "key", "model", "status", "tag", "end_user", "session"]) if (v[k]) q.set(k, v[k]);
  if (v.from) q.set("from", toInstant(v.from));
  if (v.to) q.set("to", toInstant(v.to));
  return {q, group: v.group_by};
}

async function loadUsage(reset) {
  if (reset) { cursors.length = 1; pageNo = 0; }
  const {q, group} = usageParams();
  const agg = new URLSearchParams(q);
  agg.set("group_by", group);
  // Totals default to the last 30 days, up to now.
  if (!q.has("from")) agg.set("from", new Date(Date.now() - 29 * 86400e3).toISOString().slice(0, 10));
  if (!q.has("to")) agg.set("to", new Date().toISOString().slice(0, 10));
  const rec = new URLSearchParams(q);
  rec.set("limit", formValues(document.getElementById("usage-form")).limit || "50");
  if (cursors[pageNo]) rec.set("cursor", cursors[pageNo]);
  const csv = new URLSearchParams(q);
  csv.set("format", "csv");
  csv.set("limit", "10000");
  document.getElementById("csv-link").href = `/admin/usage/records?${csv}`;
  // Without the ledger, raw records need a team and take no other filter: say so, keep the totals.
  const [a, r] = await Promise.all([api("GET", `/admin/usage?${agg}`),
    api("GET", `/admin/usage/records?${rec}`).catch(e => ({data: [], next_cursor: null, error: e.message}))]);
  document.getElementById("us-source").textContent = `source: ${a.source}`;
  document.getElementById("records-note").textContent = r.error || "";
  table(document.getElementById("usage-agg"), [[group, x => group === "model" ? modelCell(x.model) : String(x[group])], ["Requests", x => num(x.requests)],
    ["Errors", x => num(x.errors)], ["Refused", x => num(x.refused)], ["Prompt", x => num(x.prompt_tokens)],
    ["Cache read", x => num(x.cached_tokens || 0)], ["Cache write", x => num(x.cache_write_tokens || 0)],
    ["Completion", x => num(x.completion_tokens)], ["Spend", spend]], a.data);
  table(document.getElementById("usage-records"), [
    ["Time (UTC)", x => utc(x.ts_ms)], ["Team", x => x.team],
    ["Key", x => x.key_id], ["Model", x => x.model || (x.requested_model ? el("span", {class: "id"}, `${x.requested_model} (unresolved)`) : modelCell(""))], ["Deployment", x => x.deployment || "-"],
    ["Status", x => String(x.status)], ["Reason", x => x.reason ? el("code", {}, x.reason) : ""],
    ["Attempts", x => String(x.attempts)], ["Tokens", x => `${x.prompt_tokens} + ${x.completion_tokens}`],
    ["For", x => [x.tags && `tags ${x.tags}`, x.end_user && `user ${x.end_user}`, x.session && `session ${x.session}`]
      .filter(Boolean).join("; ")],
    ["Spend", x => x.unpriced ? unpricedFlag(1) : usd(x.cost_nano / 1e9)], ["Latency", x => ms(x.latency_ms)], ["TTFB", x => ms(x.ttfb_ms >= 0 ? x.ttfb_ms : null)],
    ["Request id", x => el("span", {class: "id"}, x.request_id)]], r.data);
  cursors[pageNo + 1] = r.next_cursor || "";
  document.getElementById("next-page").disabled = !r.next_cursor;
  document.getElementById("prev-page").disabled = pageNo === 0;
  document.getElementById("page-no").textContent = `page ${pageNo + 1}`;
}

// -- deployments ---------------------------------------------------------------------------
// Identical errors once, with how many times and the newest time: [{at, status, message, count}].
function grouped(errors) {
  const out = new Map();
  for (const e of errors) {
    const k = `${e.status} ${e.message}`;
    const g = out.get(k);
    if (g) { g.count += 1; if (e.at > g.at) g.at = e.at; } else out.set(k, {...e, count: 1});
  }
  return [...out.values()];
}

async function loadDeployments() {
  const d = await api("GET", "/admin/deployments");
  document.getElementById("dep-inflight").textContent = num(d.inflight);
  table(document.getElementById("deployments-table"), [
    ["Deployment", x => x.name], ["Provider", x => el("span", {"data-provider": x.name}, x.provider || "-")],
    ["Backend", x => x.backend],
    ["Base URL", x => x.base_url ? el("code", {}, x.base_url) : "-"], ["Upstream model", x => x.upstream_model],
    ["Weight", x => String(x.weight)],
    ["Health", x => el("span", {class: `state ${x.healthy ? "active" : "revoked"}`}, x.healthy ? "healthy" : x.ready ? "unhealthy" : "loading")],
    ["Circuit", x => x.circuit], ["Failures in a row", x => String(x.consecutive_failures)],
    ["Cooldown", x => x.cooldown_s ? `${x.cooldown_s.toFixed(1)} s` : "-"], ["In flight", x => String(x.inflight)],
    ["Latency (TTFB, EWMA)", x => el("span", {"data-latency": x.name}, ms(x.latency_ms))],
    ["Recent errors (UTC)", x => x.recent_errors.length
      ? el("ul", {class: "errors"}, ...grouped(x.recent_errors).map(e => el("li", {},
          `${e.at.slice(11, 19)} ${e.status}: ${e.message}`, e.count > 1 ? el("b", {class: "count"}, ` ×${e.count}`) : "")))
      : "none"],
    ["", x => x.circuit === "closed" ? "" : el("button", {onclick: () => guarded(() => closeCircuit(x.name)), "data-reset": x.name}, "Close circuit")]], d.data);
}

async function closeCircuit(name) {  // traffic flows to it again at once (this replica)
  await api("POST", "/admin/deployments/reset", {deployment: name});
  await loadDeployments();
}

// -- routing -------------------------------------------------------------------------------
const PAGES = {overview: loadOverview, keys: () => window.KeysPage.load(), usage: () => loadUsage(true),
               deployments: loadDeployments, audit: () => window.AuditPage.load(true)};
let offered = Object.keys(PAGES);

// The console follows the signed-in role (GET /admin/me): the pages it cannot use are not offered.
function applyRole(me) {
  const can = a => a in me.abilities;
  const global = me.teams === null;
  const pages = {overview: can("usage.read"), keys: can("keys.read"), usage: can("usage.read"),
                 deployments: can("deployments.read") && global, audit: can("audit.read")};
  offered = Object.keys(PAGES).filter(p => pages[p]);
  document.querySelectorAll("nav a").forEach(a => { if (!pages[a.dataset.page]) a.remove(); });
  const who = me.name || me.email || me.id;
  document.getElementById("whoami").textContent =
    `${who} · ${me.role.replace("_", " ")}${global ? "" : ` (${me.teams.join(", ")})`}`;
  document.body.dataset.role = me.role;
  // What the role cannot change is not offered either.
  document.getElementById("team-form").hidden = !can("teams.write");
  document.getElementById("key-form").hidden = !can("keys.write");
  document.getElementById("policy-form").hidden = !can("policy.write");
  document.querySelectorAll(".global-only").forEach(e => { e.hidden = !global; });
}

function show() {
  const page = (location.hash || "#overview").slice(1);
  const name = offered.includes(page) ? page : offered[0];
  document.querySelectorAll(".page").forEach(s => { s.hidden = s.id !== `page-${name}`; });
  document.querySelectorAll("nav a").forEach(a => a.classList.toggle("on", a.dataset.page === name));
  clearInterval(depTimer);
  if (name === "deployments") depTimer = setInterval(() => guarded(loadDeployments), 5000);
  document.body.dataset.loaded = "";
  guarded(PAGES[name]).then(() => { document.body.dataset.loaded = name; });
}

document.querySelectorAll("[data-range]").forEach(b => b.addEventListener("click", () => {
  range = b.dataset.range;
  guarded(loadOverview);
}));
document.getElementById("usage-form").addEventListener("submit", ev => { ev.preventDefault(); guarded(() => loadUsage(true)); });
document.getElementById("next-page").addEventListener("click", () => { pageNo += 1; guarded(() => loadUsage(false)); });
document.getElementById("prev-page").addEventListener("click", () => { pageNo -= 1; guarded(() => loadUsage(false)); });
document.getElementById("signout").addEventListener("click", () => guarded(async () => {
  await fetch("/ui/logout", {method: "POST", credentials: "same-origin", headers: {"x-csrf-token": window.Core.CSRF}});
  location.href = "/ui";
}));
window.KeysPage.init();
window.AuditPage.init();
guarded(async () => {
  applyRole(await api("GET", "/admin/me"));
  window.addEventListener("hashchange", show);
  show();
});
})();
