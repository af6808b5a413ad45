// The console's pages: overview, usage explorer, deployments; hash routing; sign out.
"use strict";

(() => {
const {api, el, table, guarded, usd, ms, num, utc, toInstant, formValues} = window.Core;
const {barChart} = window.Charts;
let range = "24h";
let depTimer = null;

// -- overview ------------------------------------------------------------------------------
const PER = {minute: "per minute", hour: "per hour", day: "per day"};

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
  document.getElementById("stat-spend").textContent = usd(t.cost_usd);
  const hits = t.cache_hits || 0;
  document.getElementById("stat-cache-hits").textContent =
    t.requests ? `${num(hits)} (${(100 * hits / t.requests).toFixed(1)}%)` : num(hits);
  document.getElementById("stat-cache-saved").textContent = usd(t.saved_usd || 0);
  document.getElementById("stat-latency").textContent = `${ms(o.latency.p50_ms)} / ${ms(o.latency.p95_ms)}`;
  document.getElementById("stat-ttfb").textContent = `${ms(o.latency.ttfb_p50_ms)} / ${ms(o.latency.ttfb_p95_ms)}`;
  document.getElementById("stat-inflight").textContent = num(o.inflight);
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
  const cols = name => [[name, r => r[name]], ["Requests", r => num(r.requests)], ["Errors", r => num(r.errors)],
                        ["Refused", r => num(r.refused)], ["Tokens", r => num(r.total_tokens)],
                        ["Spend", r => usd(r.cost_usd)]];
  table(document.getElementById("ov-models"), cols("model"), o.by_model);
  table(document.getElementById("ov-teams"), cols("team"), o.by_team);
  table(document.getElementById("ov-refused-now"), [["Team", r => r.team], ["Key", r => r.key],
    ["Reason", r => el("code", {}, r.reason || "-")], ["Refused", r => num(r.refused)],
    ["Last (UTC)", r => r.last.slice(11, 19)]], o.refused_now);
  const reasons = o.refused.some(r => r.reason);
  table(document.getElementById("ov-refused"), [["Team", r => r.team], ["Key", r => r.key],
    ...(reasons ? [["Reason", r => el("code", {}, r.reason)]] : []), ["Refused", r => num(r.refused)]], o.refused);
  table(document.getElementById("ov-unauth"), [["Reason", r => el("code", {}, r[0])], ["Requests", r => num(r[1])]],
        Object.entries(o.unauthenticated));
}

// -- usage explorer ------------------------------------------------------------------------
const cursors = [""];  // cursors[i]: the cursor that loads page i
let pageNo = 0;

function usageParams() {
  const v = formValues(document.getElementById("usage-form"));
  const q = new URLSearchParams();
  for (const k of ["team", "key", "model", "status"]) if (v[k]) q.set(k, v[k]);
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
  table(document.getElementById("usage-agg"), [[group, x => String(x[group])], ["Requests", x => num(x.requests)],
    ["Errors", x => num(x.errors)], ["Refused", x => num(x.refused)], ["Prompt", x => num(x.prompt_tokens)],
    ["Cache read", x => num(x.cached_tokens || 0)], ["Cache write", x => num(x.cache_write_tokens || 0)],
    ["Completion", x => num(x.completion_tokens)], ["Spend", x => usd(x.cost_usd)]], a.data);
  table(document.getElementById("usage-records"), [
    ["Time (UTC)", x => utc(x.ts_ms)], ["Team", x => x.team],
    ["Key", x => x.key_id], ["Model", x => x.model || x.requested_model], ["Deployment", x => x.deployment || "-"],
    ["Status", x => String(x.status)], ["Reason", x => x.reason ? el("code", {}, x.reason) : ""],
    ["Attempts", x => String(x.attempts)], ["Tokens", x => `${x.prompt_tokens} + ${x.completion_tokens}`],
    ["Spend", x => usd(x.cost_nano / 1e9)], ["Latency", x => ms(x.latency_ms)], ["TTFB", x => ms(x.ttfb_ms >= 0 ? x.ttfb_ms : null)],
    ["Request id", x => x.request_id]], r.data);
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
    ["Deployment", x => x.name], ["Backend", x => x.backend],
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
               deployments: loadDeployments};

function show() {
  const page = (location.hash || "#overview").slice(1);
  const name = page in PAGES ? page : "overview";
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
window.addEventListener("hashchange", show);
show();
})();
