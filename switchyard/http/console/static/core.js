// Shared helpers: the admin API over the session cookie, DOM building, messages.
"use strict";

const CSRF = document.querySelector('meta[name="csrf-token"]').content;

class ApiError extends Error {}

// Every call is one of the documented /admin calls; the session cookie authenticates it and the
// CSRF token (from the page, never the master key) goes with every state-changing call.
async function api(method, path, body) {
  const opts = {method, credentials: "same-origin", headers: {"x-csrf-token": CSRF}};
  if (body !== undefined) {
    opts.headers["content-type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  if (r.status === 401) { location.reload(); throw new ApiError("signed out"); }
  const data = await r.json().catch(() => ({}));
  if (!r.ok) throw new ApiError((data.error && data.error.message) || `HTTP ${r.status}`);
  return data;
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return e;
}

function table(node, columns, rows) {
  // columns: [[header, row => text or Node]]
  const body = rows.length
    ? el("tbody", {}, ...rows.map(r => el("tr", {}, ...columns.map(([, f]) => el("td", {}, f(r))))))
    : el("tfoot", {}, el("tr", {}, el("td", {colspan: columns.length, class: "muted"}, "nothing yet")));
  node.replaceChildren(el("thead", {}, el("tr", {}, ...columns.map(([h]) => el("th", {}, h)))), body);
}

function flash(message, bad) {
  const f = document.getElementById("flash");
  f.textContent = message;
  f.className = bad ? "flash bad" : "flash";
  f.hidden = !message;
}

async function guarded(fn) {
  try { flash(""); await fn(); } catch (e) { if (!(e instanceof ApiError && e.message === "signed out")) flash(e.message, true); }
}

// Money at one precision everywhere: dollars with four decimals ($0.0006, $2.0000, $1,234.5000).
const usd = v => "$" + Number(v || 0).toLocaleString("en-US", {minimumFractionDigits: 4, maximumFractionDigits: 4});
// "—": not measured (a deployment that never answered), never "0 ms".
const ms = v => v === null || v === undefined ? "—" : `${Math.round(v)} ms`;
// Instants are shown in UTC, as the page says: "2026-11-24 10:30:05".
const utc = v => new Date(v).toISOString().replace("T", " ").slice(0, 19);
const num = v => Number(v).toLocaleString("en-US");

// "2026-11-24T10:30" (a datetime-local input, which the page labels UTC) -> RFC 3339, or "".
const toInstant = v => v ? `${v.slice(0, 16)}:00Z` : "";
// RFC 3339 -> a datetime-local input's value, in UTC.
const utcInput = iso => new Date(iso).toISOString().slice(0, 16);

function formValues(form) {
  const out = {};
  for (const [k, v] of new FormData(form).entries()) out[k] = String(v).trim();
  return out;
}

function limitsFrom(values, names) {
  const limits = {};
  for (const n of names) {
    if (!(n in values)) continue;
    limits[n] = values[n] === "" ? null : Number(values[n]);
  }
  return limits;
}

const modelList = v => v ? v.split(",").map(s => s.trim()).filter(Boolean) : null;

window.Core = {CSRF, api, el, table, flash, guarded, usd, ms, num, utc, toInstant, utcInput, formValues, limitsFrom,
               modelList};
