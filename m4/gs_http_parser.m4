# serial 1
# GS_CHECK_HTTP_PARSER: Node.js's http_parser (Debian's libhttp-parser-dev,
# 2.9.3 or later: it says whether a Transfer-Encoding came), the request
# parser of the inference servers' CPU programs.
#
# --with-http-parser (default guess): optional; without it infer-cserver
# and infer-pserver are not built and configure says so. Substitutes
# HTTP_PARSER_LIBS; AM_CONDITIONAL HAVE_HTTP_PARSER.
AC_DEFUN([GS_CHECK_HTTP_PARSER], [
AC_ARG_WITH([http-parser],
	[AS_HELP_STRING([--with-http-parser], [build the inference servers C and P with libhttp-parser (default: guess)])],
	[], [with_http_parser=guess])
gs_http_parser_happy=no
AS_IF([test "x$with_http_parser" != xno], [
	AC_CHECK_HEADER([http_parser.h],
		[AC_CHECK_MEMBER([struct http_parser.uses_transfer_encoding],
			[AC_CHECK_LIB([http_parser], [http_parser_execute],
				[gs_http_parser_happy=yes; HTTP_PARSER_LIBS="-lhttp_parser"])],
			[], [[#include <http_parser.h>]])])
	AS_IF([test "x$gs_http_parser_happy" != xyes], [
		AS_IF([test "x$with_http_parser" = xguess],
			[AC_MSG_WARN([http_parser 2.9.3 or later not found: infer-cserver and infer-pserver will not be built (install libhttp-parser-dev)])],
			[AC_MSG_ERROR([--with-http-parser was given but http_parser.h (2.9.3 or later) or libhttp_parser was not found])])])
])
AC_SUBST([HTTP_PARSER_LIBS])
AM_CONDITIONAL([HAVE_HTTP_PARSER], [test "x$gs_http_parser_happy" = xyes])
])
