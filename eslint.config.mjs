// ESLint flat config: typescript-eslint's type-checked rules over every TypeScript room
// (cmd, pkg, test, hack, bench through tsconfig.json), the two .mjs scripts without types.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'test/fixtures/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    // A disable comment the code no longer needs is an error, so none outlives its reason.
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // node:test's test() and describe() return promises the runner itself awaits.
      '@typescript-eslint/no-floating-promises': [
        'error',
        { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'describe', 'it', 'suite'] }] },
      ],
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-unnecessary-condition': 'error',
      // A default branch is a deliberate answer for the cases it does not name (a reason code mapped to
      // 'other', an unknown packet logged and counted); a switch without one must name every case.
      '@typescript-eslint/switch-exhaustiveness-check': ['error', { considerDefaultExhaustiveForUnions: true }],
      // Passing on a caught error or an AbortSignal's reason unchanged is how we reject; both are typed unknown/any.
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingAny: true, allowThrowingUnknown: true }],
      // A let declared before the closures that read it, and set once they exist, stays a let.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      // Off: an async function without await is how a method meets a Promise-returning interface and turns a
      // throw into a rejection (close(), stand-in sync and dial callbacks in tests).
      '@typescript-eslint/require-await': 'off',
      // Off: tsc's noUnusedLocals and noUnusedParameters already check this, with the same `_` convention.
      '@typescript-eslint/no-unused-vars': 'off',
    },
  },
  {
    files: ['**/*.mjs'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { globals: globals.node },
  },
);
