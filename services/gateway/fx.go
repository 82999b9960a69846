package gateway

import (
	"go.uber.org/fx"

	"atoll.dev/libs/daemon"
)

// Module is the gateway for fx; it needs a Config (DefaultConfig when none is supplied).
// Its lifecycle is daemon.ServiceModule's: Start and Stop as the
// application's hooks, Instrument and Ready on the admin server.
var Module = daemon.ServiceModule[*Service]("gateway", fx.Annotate(New, fx.ParamTags(``, ``, `optional:"true"`)))
