#include "tools/strata/commands.h"
#include "tools/strata/args.h"
namespace strata::cli {
int train_main(int, char**) { return 1; }
int test_main(int, char**) { return 1; }
void apply_common_flags(const Args&) {}
}
