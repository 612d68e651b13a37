package core

import "bytes"

// MaxEnvdBytes is the largest envd binary accepted for injection
// (upstream's MaxEnvdPayloadBytes, 16 MiB).
const MaxEnvdBytes = 16 << 20

// elfMagic starts every ELF file.
var elfMagic = []byte{0x7f, 'E', 'L', 'F'}

// ValidateEnvdUpload checks an envd binary a caller uploaded, as upstream
// checks one: not empty, at most MaxEnvdBytes, an ELF file. The error
// names the "envd" form field.
func ValidateEnvdUpload(data []byte) error {
	switch {
	case len(data) == 0:
		return fieldErr("envd", "the uploaded envd binary is empty")
	case len(data) > MaxEnvdBytes:
		return fieldErr("envd", "the uploaded envd binary has %d bytes, at most %d (16 MiB)", len(data), MaxEnvdBytes)
	case !bytes.HasPrefix(data, elfMagic):
		return fieldErr("envd", "the uploaded envd binary is not an ELF executable")
	}
	return nil
}
