// Package hostilehttp sends a router what an outsider can send without
// credentials, for the routers' tests: methods of hundreds of KiB, random
// paths, and then reads back /metrics, so a test can check that nothing a
// caller invents becomes a label value (each would be a series kept for the
// life of the process).
package hostilehttp
