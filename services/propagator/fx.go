package propagator

import (
	"go.uber.org/fx"

	"atoll.dev/libs/daemon"
)

// Module is the propagator service for fx; it needs clusters.Members, and
// takes a *Config when one is supplied.
// Its lifecycle is daemon.ServiceModule's: Start and Stop as the
// application's hooks, Instrument and Ready on the admin server.
var Module = daemon.ServiceModule[*Service]("propagator", fx.Annotate(NewWithConfig, fx.ParamTags(``, ``, ``, `optional:"true"`)))
