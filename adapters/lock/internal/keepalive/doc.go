// Package keepalive watches the pinned session behind a held SQL lock. A
// lock lives as long as its session; a holder whose host died keeps it
// until the server notices the session is gone, which without traffic can
// take hours (TCP keepalive, wait_timeout). The session is therefore given
// a short idle timeout and pinged well within it: a live holder keeps its
// lock, a dead one loses it within the timeout. A failed ping means the
// session (and the lock) may be gone: Lost closes, so the holder stops
// before it writes anything else.
package keepalive
