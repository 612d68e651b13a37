// Package imagesourcetest is the conformance suite every ports.ImageSource
// adapter runs against a registry its Harness can push to:
//
//   - Resolve pins a tag to the platform manifest's digest (OCI and Docker
//     media types), picks the platform from an index or manifest list (an
//     attestation entry never matches), pins again after a tag moved while
//     the old digest stays reachable, and refuses an image for another
//     platform with core.ErrNotFound;
//   - missing repositories, tags and digests wrap core.ErrNotFound; refused
//     references and platforms wrap core.ErrInvalidArgument;
//   - StreamLayers hands out every layer in manifest order (a repeated
//     layer too), each blob's bytes matching its descriptor, with the
//     config's DiffIDs for the decoder to verify, and its wait returns the
//     verified files; it fetches the layers of the resolved digest even
//     after its tag moved; progress reports arrive in order and only grow,
//     ending complete;
//   - bytes that do not match their descriptor are refused (a size that
//     differs, and with the optional ContentCorrupter capability corrupted
//     layers, configs and platform manifests), as are layers whose DiffID
//     count differs from the config, and a refused fetch leaves nothing behind
//     that spoils the next one;
//   - credentials (the password and user name, also pasted into the
//     reference) never appear in errors, including, with the optional
//     CredentialChecker capability, a registry refusing a wrong password;
//   - a cancelled context ends Resolve and StreamLayers with an error
//     wrapping context.Canceled, also mid-download with the optional
//     Staller capability, and concurrent fetches of one image agree.
//
// The suite builds its images itself (tar, gzip, JSON) and hands the bytes
// to the harness to push; every run uses fresh repositories and random
// layer content.
package imagesourcetest
