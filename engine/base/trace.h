// The Tracer moved to core/trace.h (aio/ and cpu_adam/ record spans too, and lower layers never
// include engine/). This forwarding header keeps engine code that includes it building.
#pragma once

#include "core/trace.h"
