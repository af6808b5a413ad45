// Teams and keys: list, create (the key shown once), revoke, rotate with a grace period, edit
// limits / allowlists / expiry; spend against quotas. Each action is one documented /admin call.
"use strict";

(() => {
const {api, el, table, guarded, usd, num, toInstant, formValues, limitsFrom, modelList} = window.Core;
const LIMITS = ["rpm", "tpm", "max_concurrency", "tokens_per_day", "spend_per_day", "spend_per_month"];

function limitsText(l) {
  const parts = Object.entries(l || {}).filter(([, v]) => v !== null && v !== undefined)
    .map(([k, v]) => `${k} ${k.startsWith("spend") ? usd(v) : num(v)}`);
  return parts.join(", ") || "none";
}

function quotaBar(spent, quota, label) {
  if (!quota) return el("span", {class: "muted"}, `${usd(spent)} (no ${label} quota)`);
  return el("span", {class: "quota"},
    el("meter", {min: 0, max: quota, value: Math.min(spent, quota), low: quota * 0.7, high: quota * 0.9,
                 optimum: 0, title: `${usd(spent)} of ${usd(quota)}`}),
    ` ${usd(spent)} / ${usd(quota)}`);
}

function monthStart() {
  const d = new Date();
  return `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, "0")}-01`;
}

async function spendBy(group, from) {
  const q = new URLSearchParams({group_by: group});
  if (from) { q.set("from", from); q.set("to", new Date().toISOString().slice(0, 10)); }
  const r = await api("GET", `/admin/usage?${q}`);
  return Object.fromEntries(r.data.map(row => [row[group], row.cost_usd]));
}

function showNewKey(id, key) {
  document.getElementById("new-key-id").textContent = id;
  document.getElementById("new-key").textContent = key;
  document.getElementById("new-key-box").hidden = false;
}

function keyState(k) {
  if (k.revoked) return "revoked";
  if (k.expires_at && new Date(k.expires_at) <= new Date()) return "expired";
  return "active";
}

async function load() {
  const [teams, keys, dayTeam, monthTeam, dayKey] = await Promise.all([
    api("GET", "/admin/teams"), api("GET", "/admin/keys"), spendBy("team"), spendBy("team", monthStart()),
    spendBy("key")]);
  table(document.getElementById("teams-table"), [
    ["Team", t => t.name], ["Source", t => t.source], ["Limits", t => limitsText(t.limits)],
    ["Models", t => (t.models || ["any"]).join(", ")],
    ["Spend today", t => quotaBar(dayTeam[t.name] || 0, t.limits.spend_per_day, "daily")],
    ["Spend this month", t => quotaBar(monthTeam[t.name] || 0, t.limits.spend_per_month, "monthly")],
  ], teams.data);
  const sel = document.getElementById("key-team");
  sel.replaceChildren(...teams.data.map(t => el("option", {value: t.name}, t.name)));
  table(document.getElementById("keys-table"), [
    ["Key", k => k.id], ["Team", k => k.team], ["Source", k => k.source],
    ["Models", k => (k.models || ["any"]).join(", ")], ["Limits", k => limitsText(k.limits)],
    ["Expires", k => k.expires_at || "never"],
    ["State", k => el("span", {class: `state ${keyState(k)}`, "data-key-state": k.id}, keyState(k))],
    ["Spend today", k => quotaBar(dayKey[k.id] || 0, k.limits.spend_per_day, "daily")],
    ["", k => el("span", {class: "actions"},
      el("button", {onclick: () => edit(k), "data-edit": k.id}, "Edit"),
      k.source === "admin" && !k.revoked ? el("button", {onclick: () => rotate(k), "data-rotate": k.id}, "Rotate") : "",
      k.revoked ? "" : el("button", {class: "danger", onclick: () => revoke(k), "data-revoke": k.id}, "Revoke"))],
  ], keys.data);
}

function revoke(k) {
  if (!confirm(`Revoke key ${k.id}? Requests with it are refused within a second.`)) return;
  guarded(async () => { await api("POST", `/admin/keys/${encodeURIComponent(k.id)}/revoke`); await load(); });
}

function rotate(k) {
  const dlg = document.getElementById("rotate-dialog");
  document.getElementById("rotate-id").textContent = k.id;
  dlg.onclose = () => {
    if (dlg.returnValue !== "ok") return;
    const grace = Number(new FormData(document.getElementById("rotate-form")).get("grace_seconds") || 0);
    guarded(async () => {
      const r = await api("POST", `/admin/keys/${encodeURIComponent(k.id)}/rotate`, {grace_seconds: grace});
      showNewKey(r.id, r.key);
      await load();
    });
  };
  dlg.showModal();
}

function edit(k) {
  const dlg = document.getElementById("edit-dialog");
  const form = document.getElementById("edit-form");
  document.getElementById("edit-id").textContent = k.id;
  for (const n of LIMITS) form.elements[n].value = k.limits[n] ?? "";
  form.elements.models.value = (k.models || []).join(", ");
  form.elements.expires_at.value = k.expires_at ? localInput(k.expires_at) : "";
  dlg.onclose = () => {
    if (dlg.returnValue !== "ok") return;
    const v = formValues(form);
    guarded(async () => {
      await api("PATCH", `/admin/keys/${encodeURIComponent(k.id)}`, {
        limits: limitsFrom(v, LIMITS), models: modelList(v.models), expires_at: toInstant(v.expires_at) || null});
      await load();
    });
  };
  dlg.showModal();
}

function localInput(iso) {
  const d = new Date(iso);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
}

function init() {
  document.getElementById("new-key-done").addEventListener("click", () => {
    document.getElementById("new-key").textContent = "";
    document.getElementById("new-key-box").hidden = true;
  });
  document.getElementById("key-form").addEventListener("submit", ev => {
    ev.preventDefault();
    const v = formValues(ev.target);
    const body = {team: v.team, limits: limitsFrom(v, ["rpm", "tpm", "spend_per_day"]), models: modelList(v.models)};
    for (const [k, x] of Object.entries(body.limits)) if (x === null) delete body.limits[k];
    if (v.id) body.id = v.id;
    if (v.expires_at) body.expires_at = toInstant(v.expires_at);
    guarded(async () => {
      const r = await api("POST", "/admin/keys", body);
      showNewKey(r.id, r.key);
      ev.target.reset();
      await load();
    });
  });
  document.getElementById("team-form").addEventListener("submit", ev => {
    ev.preventDefault();
    const v = formValues(ev.target);
    const limits = limitsFrom(v, ["rpm", "tpm", "spend_per_day", "spend_per_month"]);
    for (const [k, x] of Object.entries(limits)) if (x === null) delete limits[k];
    const body = {limits};
    if (v.models) body.models = modelList(v.models);  // empty: the team's allowlist stays as it is
    guarded(async () => {
      await api("PUT", `/admin/teams/${encodeURIComponent(v.name)}`, body);
      ev.target.reset();
      await load();
    });
  });
}

window.KeysPage = {init, load};
})();
