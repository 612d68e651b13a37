package envelope

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/cubesandbox/templatecenter/core"
)

// Return codes (upstream CubeMaster errorcode, plus 130409 which CubeAPI
// already understands).
const (
	CodeSuccess  = 200
	CodeParams   = 130400
	CodeAuth     = 130401
	CodeNotFound = 130404
	CodeConflict = 130409
	CodeBusy     = 130429
	CodeInternal = 130593
	CodeDB       = 130594
)

// MsgSuccess is ret_msg of a successful call.
const MsgSuccess = "success"

// Generic messages for codes whose details stay in the log.
const (
	msgInternal = "internal error"
	msgDB       = "template store error"
)

// Ret is the result block of every response.
type Ret struct {
	Code int    `json:"ret_code"`
	Msg  string `json:"ret_msg"`
}

// Response is embedded in every public response body; the payload fields of
// the embedding struct sit beside it at the top level.
type Response struct {
	RequestID string `json:"requestID,omitempty"`
	Ret       Ret    `json:"ret"`
}

// OK is a success header.
func OK(requestID string) Response {
	return Response{RequestID: requestID, Ret: Ret{Code: CodeSuccess, Msg: MsgSuccess}}
}

// Fail is an error header built from err with CodeFor and Message.
func Fail(requestID string, err error) Response {
	return Response{RequestID: requestID, Ret: Ret{Code: CodeFor(err), Msg: Message(err)}}
}

// CodeFor maps an error to a ret_code (errors.Is on core's sentinels):
//
//	invalid argument, template id required, duplicate template,
//	no template nodes, template not ready, unsupported      -> 130400
//	unauthenticated                                         -> 130401
//	not found                                               -> 130404
//	attempt in progress, conflict, template in use,
//	invalid transition, stale update                        -> 130409
//	busy, lock held                                         -> 130429
//	store not initialized                                   -> 130594
//	anything else                                           -> 130593
//
// Upstream answered conflicts (in use, attempt in progress) with 130400; we
// emit 130409, which CubeAPI already maps to HTTP 409.
func CodeFor(err error) int {
	switch {
	case err == nil:
		return CodeSuccess
	case errors.Is(err, core.ErrStoreNotInitialized):
		return CodeDB
	case errors.Is(err, core.ErrUnauthenticated):
		return CodeAuth
	case errors.Is(err, core.ErrNotFound):
		return CodeNotFound
	case errors.Is(err, core.ErrAttemptInProgress), errors.Is(err, core.ErrConflict),
		errors.Is(err, core.ErrTemplateInUse), errors.Is(err, core.ErrInvalidTransition),
		errors.Is(err, core.ErrStaleUpdate):
		return CodeConflict
	case errors.Is(err, core.ErrBusy), errors.Is(err, core.ErrLocked):
		return CodeBusy
	case errors.Is(err, core.ErrInvalidArgument), errors.Is(err, core.ErrTemplateIDRequired),
		errors.Is(err, core.ErrDuplicateTemplate), errors.Is(err, core.ErrNoTemplateNodes),
		errors.Is(err, core.ErrTemplateNotReady), errors.Is(err, core.ErrUnsupported):
		return CodeParams
	}
	return CodeInternal
}

// Message is the ret_msg for err. Errors the caller can act on keep their
// text (it names the field or object); internal and database errors get a
// generic message so no internal detail leaks.
func Message(err error) string {
	switch CodeFor(err) {
	case CodeSuccess:
		return MsgSuccess
	case CodeInternal:
		return msgInternal
	case CodeDB:
		return msgDB
	}
	return err.Error()
}

// Write sends v (a struct embedding Response) as HTTP 200 JSON.
func Write(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError sends the envelope for err with HTTP 200. Internal and database
// errors are logged with their details, which the client never sees.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, requestID string, err error) {
	resp := Fail(requestID, err)
	if resp.Ret.Code == CodeInternal || resp.Ret.Code == CodeDB {
		if log == nil {
			log = slog.Default()
		}
		log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path,
			"request_id", requestID, "ret_code", resp.Ret.Code, "err", err)
	}
	Write(w, resp)
}
