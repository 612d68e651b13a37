package cubeapi

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
)

// publicCause is the ret_msg for an internal error whose cause the master
// knows and the caller can act on: the data plane refused this master's
// token, or could not be reached. Other internal errors keep the generic
// message (their details may leak internals; they are logged). The text
// names the setting to check, never a secret.
func (s *server) publicCause(err error) (string, bool) {
	if envelope.CodeFor(err) != envelope.CodeInternal {
		return "", false
	}
	tc := s.cfg.TemplateCenterURL
	var ne net.Error
	var ue *url.Error
	switch {
	case errors.Is(err, wire.ErrUnauthorized):
		return fmt.Sprintf("the template center at %s refused this master's callback token (HTTP 401): "+
			"set the same CUBE_TEMPLATE_CALLBACK_TOKEN on cubemaster and templatecenter", tc), true
	case errors.Is(err, wire.ErrUnavailable):
		return fmt.Sprintf("the template center at %s is unavailable (HTTP 503): it has no callback token "+
			"or no store attached; see its log and its /ready", tc), true
	case errors.As(err, &ue) || errors.As(err, &ne):
		reason := err.Error()
		if ue != nil {
			reason = ue.Err.Error()
		}
		return fmt.Sprintf("the template center at %s is unreachable (%s): is templatecenter serve running, "+
			"and is CUBE_TEMPLATE_CENTER_ADDR right?", tc, strings.TrimSpace(reason)), true
	}
	return "", false
}
