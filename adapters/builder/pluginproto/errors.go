package pluginproto

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cubesandbox/templatecenter/core"
)

// classes maps error classes to gRPC codes, in the order they are tested.
var classes = []struct {
	class error
	code  codes.Code
}{
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{core.ErrInvalidArgument, codes.InvalidArgument},
	{core.ErrUnsupported, codes.Unimplemented},
	{core.ErrNotFound, codes.NotFound},
	{core.ErrConflict, codes.AlreadyExists},
	{core.ErrBusy, codes.ResourceExhausted},
}

// toStatus turns a builder error into a gRPC status that keeps its class
// and message.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, c := range classes {
		if errors.Is(err, c.class) {
			return status.Error(c.code, err.Error())
		}
	}
	return status.Error(codes.Unknown, err.Error())
}

// RemoteError is an error returned by the plugin process. Its message is
// the plugin's; errors.Is matches the class it had there.
type RemoteError struct {
	Code    codes.Code
	Message string
	class   error
}

func (e *RemoteError) Error() string { return e.Message }

// Unwrap returns the error class (a core sentinel or a context error), or
// nil when the plugin's error had none.
func (e *RemoteError) Unwrap() error { return e.class }

// fromStatus turns a gRPC error back into a classed error.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	re := &RemoteError{Code: st.Code(), Message: st.Message()}
	for _, c := range classes {
		if c.code == st.Code() {
			re.class = c.class
			break
		}
	}
	return re
}
