package control

import (
	"encoding/json"
	"fmt"

	"github.com/cubesandbox/templatecenter/core"
)

// registryAuth is what a job's sealed RegistryAuth holds.
type registryAuth struct {
	Username string `json:"u,omitempty"`
	Password string `json:"p,omitempty"`
}

// sealAuth seals req's registry credentials for the job row; "" when there
// are none or no Sealer is configured (then a redo that must rebuild a
// private image needs the credentials again).
func (s *Service) sealAuth(req *core.FromImageRequest) (string, error) {
	if s.Sealer == nil || (req.RegistryUsername == "" && req.RegistryPassword == "") {
		return "", nil
	}
	b, err := json.Marshal(registryAuth{Username: req.RegistryUsername, Password: req.RegistryPassword})
	if err != nil {
		return "", err
	}
	sealed, err := s.Sealer.Seal(b)
	if err != nil {
		return "", fmt.Errorf("seal registry credentials: %w", err)
	}
	return sealed, nil
}

// openAuth returns the credentials sealed in a job's RegistryAuth; a value
// that cannot be opened (no Sealer, another key) is an error that says so
// without quoting it.
func (s *Service) openAuth(sealed string) (registryAuth, error) {
	var a registryAuth
	if sealed == "" {
		return a, nil
	}
	if s.Sealer == nil {
		return a, fmt.Errorf("the template's registry credentials are sealed but no sealer is configured: %w", core.ErrUnsupported)
	}
	b, err := s.Sealer.Open(sealed)
	if err != nil {
		return a, fmt.Errorf("open the template's registry credentials (sealed with another key?): %w", err)
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return a, fmt.Errorf("the template's sealed registry credentials are malformed: %w", core.ErrInvalidArgument)
	}
	return a, nil
}
