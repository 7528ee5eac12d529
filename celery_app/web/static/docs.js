// Swagger UI (vendored: swagger-ui-bundle.js, swagger-ui.css, swagger-ui-LICENSE) over the
// server's own OpenAPI document. "Authorize" takes a token from `kernel users add`.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var root = document.getElementById("swagger-ui");
  window.SwaggerUIBundle({
    url: root.dataset.url,
    domNode: root,
    deepLinking: true,
    validatorUrl: null,
    tryItOutEnabled: false,
  });
});
