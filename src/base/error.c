/* Error names.  treadle returns negative errno values; this only names them. */
#include <string.h>

#include "base/base.h"

const char *tdl_strerror(int err)
{
  if (err < 0)
    err = -err;
  if (err == 0)
    return "success";
  /* strerrordesc_np (glibc >= 2.32) returns a static string and, unlike
   * strerror(), touches no shared buffer and no locale. */
  const char *s = strerrordesc_np(err);
  return s ? s : "unknown error";
}
