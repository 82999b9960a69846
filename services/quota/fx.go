package quota

import (
	"go.uber.org/fx"

	"atoll.dev/libs/daemon"
)

// Module is the quota service for fx. It takes a *Config; DefaultConfig
// is used when none is supplied.
// Its lifecycle is daemon.ServiceModule's: Start and Stop as the
// application's hooks, Instrument and Ready on the admin server.
var Module = daemon.ServiceModule[*Service]("quota", fx.Annotate(New, fx.ParamTags(``, ``, `optional:"true"`)))
