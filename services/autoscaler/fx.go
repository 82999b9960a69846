package autoscaler

import (
	"go.uber.org/fx"

	"atoll.dev/libs/daemon"
)

// Module is the autoscaler service for fx.
// Its lifecycle is daemon.ServiceModule's: Start and Stop as the
// application's hooks, Instrument and Ready on the admin server.
var Module = daemon.ServiceModule[*Service]("autoscaler", fx.Annotate(New, fx.ParamTags(``, ``, `optional:"true"`)))
