//go:build !freezepoints

package freezepoint

// Built is whether this binary can freeze itself (the freezepoints tag).
const Built = false

// At does nothing in a build without the freezepoints tag.
func At(Point) {}
