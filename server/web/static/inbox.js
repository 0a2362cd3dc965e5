// toolgate inbox: live updates without a framework. The waiting list and
// a call's page poll a read-only JSON endpoint every two seconds and update
// the page in place; decisions stay plain HTML form posts.
"use strict";

const POLL_MS = 2000;

// poll fetches url every POLL_MS and hands the JSON to apply; it stops
// when apply returns false. Hidden tabs skip their turn.
function poll(url, apply) {
  const next = (ms) => setTimeout(tick, ms);
  async function tick() {
    if (document.hidden) return next(POLL_MS);
    try {
      const resp = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
      if (resp.status === 401) throw new Error("you are signed out; reload the page to sign in");
      if (!resp.ok) throw new Error("the server answered " + resp.status);
      const data = await resp.json();
      liveStatus("");
      if (apply(data) !== false) next(POLL_MS);
    } catch (err) {
      liveStatus("Live updates paused: " + err.message);
      next(POLL_MS * 2);
    }
  }
  next(POLL_MS);
}

function liveStatus(text) {
  const el = document.getElementById("live-status");
  el.textContent = text;
  el.hidden = !text;
}

// el makes an element with a class and text; text is never parsed as HTML.
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// The waiting list: the same markup as list.html renders.
function callItem(c) {
  const head = el("span", "head");
  head.append(el("span", "tool", c.tool), " ", el("span", "id", c.call_id), " ", el("span", "age", c.age));
  const a = el("a");
  a.href = c.url;
  a.append(head, el("span", "message", c.message), el("code", "args", c.args), el("span", "meta", "session " + c.session));
  const li = el("li", "call");
  li.append(a);
  return li;
}

// One page of it, oldest first: the poll reads the same page again, and
// the count is every waiting call the approver may decide.
const list = document.getElementById("pending");
if (list) {
  poll(list.dataset.live, (data) => {
    list.replaceChildren(...data.calls.map(callItem));
    document.getElementById("pending-count").textContent = data.total;
    document.getElementById("pending-empty").hidden = data.calls.length > 0;
    document.getElementById("pending-shown").textContent = data.calls.length;
    const next = document.getElementById("pending-next");
    next.hidden = !data.next_url;
    if (data.next_url) next.href = data.next_url;
    document.getElementById("pending-paging").hidden = !(data.later || data.next_url);
    document.title = (data.total ? "(" + data.total + ") " : "") + "Waiting · toolgate inbox";
  });
}

// A call's page: show a decision taken elsewhere and disable the buttons.
const call = document.getElementById("call");
if (call && call.dataset.live) {
  poll("/inbox/state.json?call=" + encodeURIComponent(call.dataset.call), (s) => {
    for (const [id, value] of [["status", s.status], ["age", s.age], ["time-left", s.time_left]]) {
      const e = document.getElementById(id);
      if (e && value) e.textContent = value;
    }
    if (!s.pending && (s.decided || s.final)) {
      const banner = document.getElementById("decided");
      banner.textContent = s.decided ? "decided: " + s.decided : "finished: " + s.status;
      banner.hidden = false;
      document.querySelectorAll("#decide button, #decide textarea").forEach((b) => { b.disabled = true; });
    }
    // A page loaded before the call asked a person (to show the form) or
    // while its tool ran (to show the outcome) is worth a fresh render.
    if (!call.dataset.pending && (s.pending || s.final)) location.reload();
    return !s.final;
  });
}

// Edited arguments must be a JSON object; nothing is sent otherwise.
const form = document.getElementById("decide");
if (form) {
  const args = document.getElementById("edited-args");
  const error = document.getElementById("args-error");
  form.addEventListener("submit", (e) => {
    if (!e.submitter || e.submitter.value !== "approve_edited") return;
    const problem = checkArgs(args.value);
    error.textContent = problem;
    error.hidden = !problem;
    if (problem) {
      e.preventDefault();
      args.focus();
    }
  });
  args.addEventListener("input", () => { error.hidden = true; });
}

function checkArgs(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return "The arguments are not valid JSON: " + err.message;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return "The arguments must be a JSON object, like {\"path\": \"notes.txt\"}.";
  }
  return "";
}

// A call whose rule needs a passkey: an approval first asks the server for
// the decision's challenge (what this person approves: the call, its run,
// the arguments that will run), has the person's passkey sign it
// (navigator.credentials.get, user verification required), and sends the
// signed answer with the decision. A denial goes as it is.
if (form && form.dataset.passkey) {
  const answer = form.querySelector('input[name="webauthn"]');
  const problem = document.getElementById("passkey-error");
  form.addEventListener("submit", async (e) => {
    const choice = e.submitter && e.submitter.value;
    if (e.defaultPrevented || !choice || !choice.startsWith("approve")) return;
    e.preventDefault();
    problem.hidden = true;
    try {
      // URL-encoded, as the form itself posts (the server reads no multipart).
      const body = new URLSearchParams(new FormData(form));
      body.set("decision", choice);
      const resp = await fetch(form.dataset.passkey, { method: "POST", body, cache: "no-store" });
      const ch = await resp.json().catch(() => ({}));
      if (!resp.ok) throw new Error((ch.error && ch.error.message) || "the server answered " + resp.status);
      const cred = await navigator.credentials.get({ publicKey: {
        challenge: fromB64url(ch.challenge), rpId: ch.rp_id, userVerification: "required", timeout: 120000,
      } });
      answer.value = JSON.stringify({ credential: assertionJSON(cred), expires: ch.expires });
      const decision = document.createElement("input");
      decision.type = "hidden";
      decision.name = "decision";
      decision.value = choice;
      form.append(decision);
      form.submit();
    } catch (err) {
      problem.textContent = "The passkey did not sign the decision: " + err.message;
      problem.hidden = false;
    }
  });
}

function toB64url(buf) {
  let s = "";
  for (const b of new Uint8Array(buf)) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function fromB64url(s) {
  const bin = atob(s.replace(/-/g, "+").replace(/_/g, "/"));
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

// assertionJSON is a get ceremony's credential in WebAuthn's JSON
// (PublicKeyCredential.toJSON()).
function assertionJSON(cred) {
  const r = cred.response;
  return {
    id: cred.id, rawId: toB64url(cred.rawId), type: cred.type,
    response: {
      authenticatorData: toB64url(r.authenticatorData), clientDataJSON: toB64url(r.clientDataJSON),
      signature: toB64url(r.signature), userHandle: r.userHandle ? toB64url(r.userHandle) : undefined,
    },
  };
}
