package cubeletpb

// Succeeded reports whether a Ret means success: 200, or 0 from peers that
// leave the field unset.
func (r *Ret) Succeeded() bool {
	if r == nil {
		return true
	}
	return r.RetCode == ErrorCode_Success || r.RetCode == ErrorCode_OK
}
