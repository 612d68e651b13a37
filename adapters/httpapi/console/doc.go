// Package console serves the operator's web console: static HTML, CSS and
// JavaScript modules embedded in the binary, mounted by the master at
// /console/. The files hold no template data and need no credentials; the
// page reads and acts through the public JSON API with the same
// credentials as any API client (a bearer token the operator pastes,
// kept in the tab's sessionStorage and sent as the Authorization header,
// never a cookie), so a cross-site request can neither read nor act.
//
// Every answer carries a strict Content-Security-Policy (only this
// origin's scripts, styles and requests, no framing), nosniff and
// no-referrer; the scripts render server strings with textContent only.
// Nothing is loaded from elsewhere: no CDN, no web fonts.
package console
