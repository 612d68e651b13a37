// Package envelope writes the upstream public API envelope used by every
// /cube/* route:
//
//	{"requestID": "...", "ret": {"ret_code": 200, "ret_msg": "success"}, ...payload}
//
// Business results, errors included, are HTTP 200 with a ret_code; CodeFor
// maps core's sentinel errors to the codes. It also holds Decode, the JSON
// body reader every route uses (size cap, field-naming messages), because
// public and internal routes must reject bad bodies the same way.
package envelope
