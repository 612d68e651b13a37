// Package sealer implements ports.Sealer with AES-256-GCM under keys of
// their own (CUBE_MASTER_SEALING_KEYS, or the key file
// CUBE_MASTER_SEALING_KEY_FILE), never the callback token: a copy of the
// database together with that token opens nothing. Each key has an id,
// written into what it seals ("v2.<id>." + base64url(nonce || ciphertext
// || tag)), so keys rotate: the first key seals, every listed key opens,
// and Current tells a value sealed with an older key, which the master
// seals again when it starts.
//
// Values of the legacy form ("v1."), sealed with a key derived from the
// callback token, open while that token is given (New's legacySecret), so
// they can be sealed again; nothing new is sealed that way.
package sealer
