// toolgate inbox: adding a passkey. The server begins the WebAuthn
// registration (POST /account/passkeys/options), the browser's
// authenticator makes the credential, and the server checks and
// registers it (POST /account/passkeys). Both posts carry the page's CSRF
// token in X-CSRF-Token.
"use strict";

// A block of its own: the layout's inbox.js shares the page's global scope.
{
  // b64url encodes bytes as base64url without padding; bytes decodes it.
  function b64url(buf) {
    let s = "";
    for (const b of new Uint8Array(buf)) s += String.fromCharCode(b);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function bytes(s) {
    const bin = atob(s.replace(/-/g, "+").replace(/_/g, "/"));
    return Uint8Array.from(bin, (c) => c.charCodeAt(0));
  }

  // post sends JSON and returns the answer's JSON, or throws its message.
  async function post(url, csrf, body) {
    const resp = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify(body || {}),
      cache: "no-store",
    });
    const data = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new Error((data.error && data.error.message) || "the server answered " + resp.status);
    return data;
  }

  // creationOptions turns the server's options (WebAuthn's JSON) into what
  // navigator.credentials.create takes: byte strings as bytes.
  function creationOptions(opts) {
    const pk = opts.publicKey;
    pk.challenge = bytes(pk.challenge);
    pk.user.id = bytes(pk.user.id);
    for (const c of pk.excludeCredentials || []) c.id = bytes(c.id);
    return { publicKey: pk };
  }

  // credentialJSON is the browser's new credential in WebAuthn's JSON.
  function credentialJSON(cred) {
    const r = cred.response;
    return {
      id: cred.id,
      rawId: b64url(cred.rawId),
      type: cred.type,
      authenticatorAttachment: cred.authenticatorAttachment || undefined,
      clientExtensionResults: cred.getClientExtensionResults ? cred.getClientExtensionResults() : {},
      response: {
        clientDataJSON: b64url(r.clientDataJSON),
        attestationObject: b64url(r.attestationObject),
        transports: r.getTransports ? r.getTransports() : undefined,
      },
    };
  }

  const form = document.getElementById("passkey-add");
  if (form) {
    const error = document.getElementById("passkey-error");
    const button = document.getElementById("passkey-add-button");
    const show = (text) => {
      error.textContent = text;
      error.hidden = !text;
    };
    if (!window.PublicKeyCredential) {
      show("This browser cannot make passkeys (WebAuthn is missing, or the page is not on https or localhost).");
      button.disabled = true;
    }
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const name = document.getElementById("passkey-name").value.trim();
      if (!name) return show("Name the passkey first.");
      show("");
      button.disabled = true;
      try {
        const csrf = form.dataset.csrf;
        const opts = await post("/account/passkeys/options", csrf);
        const cred = await navigator.credentials.create(creationOptions(opts));
        if (!cred) throw new Error("no passkey was made");
        const done = await post("/account/passkeys", csrf, { name, credential: credentialJSON(cred) });
        location.assign(done.url);
      } catch (err) {
        show("The passkey was not added: " + err.message);
        button.disabled = false;
      }
    });
  }
}
