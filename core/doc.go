// Package core is the domain of the template supply chain: the image-job
// state machine, templates, aliases, artifacts and placements, the template
// spec fingerprint, and the services that apply those rules through ports.
//
// core depends only on the standard library, the ports package and small pure
// type libraries. It never imports a database driver, ent, chi, regclient,
// gocloud, rueidis, go-plugin or any adapters/apps package; a test in
// internal/archtest keeps it that way.
package core
