package cubeapi

import (
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
)

// statusCallback is POST /internal/template/jobs/{job_id}/status.
func (s *server) statusCallback(w http.ResponseWriter, r *http.Request) {
	jobID := chi.URLParam(r, "job_id")
	if err := wire.ValidateID("job_id", jobID); err != nil {
		s.callbackReject(w, http.StatusBadRequest, err.Error())
		return
	}
	limit := s.cfg.MaxBodyBytes
	if limit <= 0 {
		limit = envelope.DefaultMaxBodyBytes
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	rep, err := wire.DecodeStatusReport(r.Body)
	if err != nil {
		status := http.StatusBadRequest
		var de *envelope.DecodeError
		if errors.As(err, &de) && de.TooLarge {
			status = http.StatusRequestEntityTooLarge
		}
		s.callbackReject(w, status, err.Error())
		return
	}
	if s.cfg.Reports == nil {
		s.cfg.Metrics.Callback(metrics.CallbackError)
		wire.WriteError(w, http.StatusServiceUnavailable, "status callbacks are not configured on this master")
		return
	}
	applied, err := s.cfg.Reports.HandleStatusReport(r.Context(), jobID, rep)
	switch {
	case err == nil || errors.Is(err, core.ErrStaleUpdate):
		if err != nil {
			applied = false
		}
		if applied {
			s.cfg.Metrics.Callback(metrics.CallbackApplied)
		} else {
			s.cfg.Metrics.Callback(metrics.CallbackStale)
		}
		wire.WriteJSON(w, http.StatusOK, wire.StatusOK{Status: "ok", Applied: applied})
	case errors.Is(err, core.ErrInvalidTransition):
		s.callbackReject(w, http.StatusConflict, err.Error())
	case r.Context().Err() != nil:
		// The sender hung up first: a progress report it no longer needs
		// (a later report supersedes it), or a retry comes. Not our failure.
		s.cfg.Metrics.Callback(metrics.CallbackAbandoned)
		s.log.DebugContext(r.Context(), "status callback abandoned by the sender", "job_id", jobID, "status", rep.Update.Status, "err", err)
	default:
		status := wire.StatusFor(err)
		if status < 500 {
			s.callbackReject(w, status, err.Error())
			return
		}
		// The reporter retries 5xx, so nothing is lost; the details stay
		// in our log.
		s.cfg.Metrics.Callback(metrics.CallbackError)
		s.log.ErrorContext(r.Context(), "status callback failed", "job_id", jobID, "status", rep.Update.Status, "err", err)
		msg := "internal error"
		if status == http.StatusServiceUnavailable {
			msg = "service unavailable"
		}
		wire.WriteError(w, status, msg)
	}
}

func (s *server) callbackReject(w http.ResponseWriter, status int, msg string) {
	s.cfg.Metrics.Callback(metrics.CallbackRejected)
	wire.WriteError(w, status, msg)
}
