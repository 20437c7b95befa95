package local

import (
	"github.com/hybridlimit/hybridlimit/internal/localhook"
)

// init hands the module's other packages what they need of this package
// and users do not: see internal/localhook.
func init() {
	localhook.Derive = func(p Limit) (localhook.Derived, error) {
		c, err := compile(p)
		if err != nil {
			return localhook.Derived{}, err
		}
		return c.derived(), nil
	}
}
