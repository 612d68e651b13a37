// Package adoption tests that this service takes over a database upstream's
// master created: the schema is adopted by additions only, and the
// templates upstream made are then read, redone and deleted through the
// public API. It holds tests only.
package adoption
