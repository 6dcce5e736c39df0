//go:build !plantedbugs

package planted

// Built is whether this binary can plant bugs (the plantedbugs tag).
const Built = false

// On reports whether bug is planted: never, in a build without the plantedbugs tag.
func On(Bug) bool { return false }
